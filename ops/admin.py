"""The operations console's part of the admin: the index links to the status dashboard.

`ops` has no models; admin autodiscovery imports this module, which is the one place that
knows the dashboard exists.
"""

from ops.dashboard import install_index_link

install_index_link()
