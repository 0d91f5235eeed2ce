"""Running the companion: profiles, claims as records, result files, the papermill runner, the gallery, the CLI."""
