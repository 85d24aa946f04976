// Runs every server audit of graphql-http (GraphQL over HTTP conformance) against one endpoint and
// prints the results as a JSON array: {id, name, status, reason, response}.
// Usage: node graphql_http_audit.mjs URL TOKEN NODE_MODULES
import { createRequire } from "node:module";
import path from "node:path";

const [url, token, modules] = process.argv.slice(2);
// The package lives in the front-end assets' node_modules (pinned there), not beside this script.
const { serverAudits } = createRequire(path.join(path.resolve(modules), "noop.js"))("graphql-http");

// Every audit request carries the token: without it each one would only see our 401.
function fetchFn(input, init = {}) {
  return fetch(input, { ...init, headers: { authorization: `Bearer ${token}`, ...init.headers } });
}

async function describe(response) {
  if (!response) return null;
  let body = null;
  try {
    body = (await response.clone().text()).slice(0, 500);
  } catch {
    // the audit already read it
  }
  return { status: response.status, contentType: response.headers.get("content-type"), body };
}

const results = [];
// One at a time: the server under test shares the machine with other suites.
for (const audit of serverAudits({ url, fetchFn })) {
  const result = await audit.fn();
  results.push({
    id: result.id,
    name: result.name,
    status: result.status,
    reason: result.reason ?? null,
    response: result.status === "ok" ? null : await describe(result.response),
  });
}
process.stdout.write(JSON.stringify(results));
