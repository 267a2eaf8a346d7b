"""The static HTML site over runs: matrix, item pages, comparisons."""
