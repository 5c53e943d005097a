"""HTTP: the route table, the API handlers, the console, OpenAPI, metrics."""
