"""One module per measured system. Each peer class runs alone in its own process (see ``bench._driver``)."""
