"""How results look: tables as Markdown, LaTeX, CSV and JSON and the number formats they share
(text.py), the figures' layout, colours and writer (figure_layout.py, palette.py), the report's
index page as Markdown and HTML (page.py)."""
