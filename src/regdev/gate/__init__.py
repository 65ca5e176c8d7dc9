"""The pipeline a tool call goes through: parse, validate (the schema subset, the reference
validator and the compiler), authorize (policy), execute and observe; the tool registry. It
imports the devices it executes on and the audit log it records to, never an agent or the CLI."""
