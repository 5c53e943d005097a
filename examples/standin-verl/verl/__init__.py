"""Stand-in for verl's trainer entry modules (NOT verl); see ../README.md."""
