"""A small documentation site built as the original service built hosted docs: every page
carries READTHEDOCS_DATA and the original's doc-embed bundle (test_doc_embed.py copies the
bundle into ``_static/``). The values of READTHEDOCS_DATA come from the environment of the
build, as the original's builder wrote them into its pages."""

import os

project = "Pip"
html_theme = "alabaster"
templates_path = ["_templates"]
html_static_path = ["_static"]
html_js_files = ["readthedocs-doc-embed.js"]
html_context = {
    "rtd_project": os.environ["RTD_PROJECT"],
    "rtd_version": os.environ["RTD_VERSION"],
    "rtd_api_host": os.environ["RTD_API_HOST"],
}

