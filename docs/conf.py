"""Sphinx configuration of torchwork's documentation (``make docs``; warnings are errors).

Sphinx with MyST (Markdown) rather than MkDocs: Sphinx and myst-parser are actively maintained, autodoc
reads the docstrings for the API reference, and Material for MkDocs, the usual MkDocs theme, announced
maintenance mode in late 2025 (see design/docs-generator.md).
"""

# autodoc imports torchwork as installed (``make venv`` installs it editable); no sys.path edit here, since
# pytest imports this file too (--doctest-modules) and a source folder put first on the path changes what
# importlib.metadata finds in the test process.

project = "torchwork"
author = "the torchwork developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
myst_heading_anchors = 3
html_theme = "furo"
html_title = "torchwork"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Links to files of the repository (examples/, benchmarks/) are not documents of this site.
suppress_warnings = ["myst.xref_missing"]
