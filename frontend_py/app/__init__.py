"""The web app's browser layer: GraphQL transport, rendering and wiring around the client kit."""
