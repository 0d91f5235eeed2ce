"""Running the companion: profiles, the notebook helper, the papermill runner, the run plan, the gallery and its\nbrowser check, the scorecard and the CLI."""
