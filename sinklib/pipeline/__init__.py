"""Running the companion: profiles, the notebook helper, the papermill runner, the run plan, the gallery, the
scorecard and the CLI."""
