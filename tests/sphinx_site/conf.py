project = "Widgetry"
author = "The Widgetry authors"
extensions = []
html_theme = "alabaster"
language = "en"
