"""Root conftest: what the whole repository's test run needs.

pytester must be enabled from the root conftest (pytest refuses `pytest_plugins` in nested ones);
the plugin's own tests drive whole pytest sessions through it.
"""

pytest_plugins = ["pytester"]
