"""Does the reproduction hold here? The scorecard of every notebook's claims (``scorecard``, its figures and
``90_scorecard``'s protocol), ``make verify`` against the committed reference (``verify``), what a run's numbers
depend on besides the code (``environment``), and what a reader may read of a figures folder (``figures_folder``)."""
