"""Built-in search strategies: beam, greedy, sampling."""
