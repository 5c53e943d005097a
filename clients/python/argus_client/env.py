"""Where the SDK and the CLI find the service and the token by default (no imports:
the CLI reads these before it loads the HTTP stack)."""

DEFAULT_URL = "http://127.0.0.1:8080"
URL_ENV = "ARGUS_URL"
TOKEN_ENV = "ARGUS_API_TOKEN"
