"""Chat templates: rendering (jinja2, HF style) and what a template can do."""
