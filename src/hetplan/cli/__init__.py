"""The command line: one module per verb; each parses its arguments, calls one flow of
:mod:`hetplan.usecases` and prints."""
