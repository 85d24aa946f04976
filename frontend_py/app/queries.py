"""The GraphQL documents the web app sends (contract names only; see api-contract.graphql)."""

SESSION_FIELDS = """id taskId state isPrimary inputCapable createdAt pendingAction
pendingActionRevision { epoch sequence }"""

SUMMARY_FIELDS = "taskId revision pendingAction updatedAt"

QUESTION_FIELDS = """pendingId questionId title prompt multiSelect status agentDisconnected answerQueued
options { id label description } response { selectedOptionIds customText }"""

BUNDLE_FIELDS = "pendingId sessionId taskId turnId state context questions { " + QUESTION_FIELDS + " }"

DECISION_FIELDS = "behavior updatedInput message remember auto rule { pattern behavior scope }"

PERMISSION_FIELDS = (
    "pendingId sessionId taskId turnId state toolName input toolUseId context agentDisconnected"
    " decision { " + DECISION_FIELDS + " } suggestions { pattern label broad warning }"
)

MESSAGE_FIELDS = "id sessionId turnId kind author content createdAt clarification { " + QUESTION_FIELDS + " }"

TURN_FIELDS = "id sessionId startedAt completedAt createdAt lifecycleOnly"

# The boot payload: every task with its summary (the icon). Sessions are loaded per task: when it is
# opened, or up front for a task whose summary is null (the legacy pending fallback needs them).
TASKS = (
    "query TaskList { tasks { id title workflowStep primarySessionId project summary { "
    + SUMMARY_FIELDS
    + " } } }"
)

# The forced, authoritative load task activation makes (named so tests can hold it back).
ACTIVATION_SESSIONS = (
    "query ActivationSessions($taskId: ID!) { taskSessions(taskId: $taskId) { "
    + SESSION_FIELDS
    + " activeClarification { pendingId sessionId state context questions { "
    + QUESTION_FIELDS
    + " } } activePermission { "
    + PERMISSION_FIELDS
    + " } } }"
)

ROUTE_SESSIONS = (
    "query RouteSessions($taskId: ID!) { taskSessions(taskId: $taskId) { "
    + SESSION_FIELDS
    + " activeClarification { pendingId sessionId state context } activePermission { "
    + PERMISSION_FIELDS
    + " } } }"
)

SESSION_HISTORY = (
    "query SessionHistory($sessionId: ID!) { sessionTurns(sessionId: $sessionId) { "
    + TURN_FIELDS
    + " } sessionMessages(sessionId: $sessionId) { "
    + MESSAGE_FIELDS
    + " } }"
)

SESSION_TURNS = (
    "query SessionTurns($sessionId: ID!) { sessionTurns(sessionId: $sessionId) { " + TURN_FIELDS + " } }"
)

RESPOND = (
    "mutation Respond($pendingId: ID!, $answers: [ClarificationAnswerInput!]!, $rejected: Boolean!) {"
    " respondToClarification(pendingId: $pendingId, answers: $answers, rejected: $rejected) {"
    " __typename"
    " ... on ClarificationResponded { resumed queued responded: bundle { pendingId state } }"
    " ... on ClarificationConflict { pendingId reason winner: bundle { " + BUNDLE_FIELDS + " } }"
    " ... on ClarificationDeliveryFailed { pendingId retryable message } } }"
)

RESPOND_PERMISSION = (
    "mutation RespondPermission($pendingId: ID!, $behavior: PermissionBehavior!, $updatedInput: JSON,"
    " $message: String, $remember: Boolean!, $rememberAnyInput: Boolean!, $rememberPattern: String,"
    " $rememberScope: RuleScope!) {"
    " respondToPermission(pendingId: $pendingId, behavior: $behavior, updatedInput: $updatedInput,"
    " message: $message, remember: $remember, rememberAnyInput: $rememberAnyInput,"
    " rememberPattern: $rememberPattern, rememberScope: $rememberScope) {"
    " __typename"
    " ... on PermissionResponded { resumed queued request { " + PERMISSION_FIELDS + " } }"
    " ... on ClarificationConflict { pendingId reason }"
    " ... on ClarificationDeliveryFailed { pendingId retryable message } } }"
)

# One request with its decision: what a closed or conflicting card says was decided instead.
PERMISSION = (
    "query Permission($pendingId: ID!) { permission(pendingId: $pendingId) { " + PERMISSION_FIELDS + " } }"
)

PERMISSION_RULES = (
    "query PermissionRules($sessionId: ID!) { permissionRules(sessionId: $sessionId) {"
    " id sessionId toolName input createdAt pattern behavior scope scopeId expiresAt decisions"
    " lastDecidedAt } }"
)

IMPORT_RULES = (
    "mutation ImportRules($settings: JSON!, $scope: RuleScope!, $scopeId: ID) {"
    " importPermissionRules(settings: $settings, scope: $scope, scopeId: $scopeId) { id } }"
)

RULE_SETTINGS = (
    "query RuleSettings($scope: RuleScope!, $scopeId: ID) {"
    " permissionSettings(scope: $scope, scopeId: $scopeId) }"
)

REVOKE_RULE = "mutation RevokeRule($ruleId: ID!) { revokePermissionRule(ruleId: $ruleId) }"

TASK_SUMMARIES = "subscription Summaries { taskSummaryChanged { " + SUMMARY_FIELDS + " } }"

TASK_PROJECTIONS = (
    "subscription Projections($taskId: ID) { pendingActionChanged(taskId: $taskId) {"
    " sessionId pendingAction revision { epoch sequence } } }"
)

SESSION_EVENTS = (
    "subscription Events($sessionId: ID!) { sessionEvents(sessionId: $sessionId) {"
    " kind messageId message { "
    + MESSAGE_FIELDS
    + " } projection { sessionId pendingAction revision { epoch sequence } } } }"
)

# The sign-in form tries a token with this before keeping it: a refused one is HTTP 401.
SIGN_IN_CHECK = "query SignInCheck { __typename }"

# --- the inbox and the audit trail (turn 4) ---------------------------------------------------------

INBOX_ITEM_FIELDS = (
    "pendingId kind taskId taskTitle sessionId askedAt agentWaiting"
    " clarification { " + BUNDLE_FIELDS + " } permission { " + PERMISSION_FIELDS + " }"
)

# Everything that waits for the signed-in person, oldest first: read once at start (it is often
# there before the socket is), then at once and after every change from the subscription.
INBOX = "query Inbox { inbox(first: 200) { " + INBOX_ITEM_FIELDS + " } }"
INBOX_CHANGED = "subscription InboxChanged { inboxChanged { " + INBOX_ITEM_FIELDS + " } }"

AUDIT_FIELDS = (
    "pendingId kind taskId sessionId askedAt decidedAt decidedBy outcome summary edited message"
    " updatedInput ruleId"
)

# A session's settled pending actions, newest first: who decided what (the history's decision lines).
SESSION_DECISIONS = (
    "query SessionDecisions($sessionId: ID!) { decisions(sessionId: $sessionId, first: 500) { "
    + AUDIT_FIELDS
    + " } }"
)

# The input an edited allow changed: its decision line shows the diff.
PERMISSION_INPUT = (
    "query PermissionInput($pendingId: ID!) { permission(pendingId: $pendingId) { pendingId input } }"
)
