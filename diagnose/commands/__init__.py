"""One module per subcommand, each exporting ``command`` (a click command)."""
