"""Every rendering: tables (pandas), HTML (one Jinja2 environment, autoescape), Markdown, verdict tables,
certificates, the gate-check page, the terminal table and pytest-benchmark JSON."""
