"""How a prompt reaches an agent: one small interface, several transports."""
