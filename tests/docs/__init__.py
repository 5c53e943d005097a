"""The docs tier: every command block of README.md and docs/*.md run on a real quick start
(docs/development.md, "Docs that run")."""
