"""The API's request and response bodies, each declared once, as a pydantic model: the
tasks' and the queue's (``tasks``), users', tokens' and usage's (``accounts``), the
pipelines' (``pipelines``); the webhooks' are ``service.webhooks.schemas``, the JobSpec's
``service.jobspec.schema``. ``service.web.openapi`` generates the OpenAPI document's
components from them (``service.jobspec.generate.json_schema_of``: no titles, nullable
scalars as ``type: [T, "null"]``), and its paths from the route table
(``service.web.routes.ROUTES``) with each route's operation (``service.web.operations``).

A request body is validated by its model (``service.web.api.body.read_shape``: unknown
fields, then each field's rule, every problem with its field in a 400); an answer is
built by ``service.web.api.views`` as JSON and held to its model by the unit tests, which
validate answers against the served document.
"""
