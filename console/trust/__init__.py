"""The room for trust: the pure rules that make the product trustworthy and what the owner sees of them (provenance,
policy, the call view). No storage, no IO: the core keeps the ledgers, the agents' gateway enforces."""
