"""Running the companion: profiles, every notebook's protocol by name (``protocols``), the notebook helper, the
papermill runner, the run plan, the gallery, the scorecard and the CLI."""
