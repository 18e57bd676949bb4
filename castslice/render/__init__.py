"""Writers of other languages: the webhook's registration (YAML), the admission policies
(CEL), and the chart's schema, values and checks and the docs' table (JSON Schema, Go
templates, Markdown), each generated from the Python that decides."""
