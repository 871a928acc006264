"""moplace's built-in searchers: they propose strategies and learn from their evaluations.

The driver (`moplace.optimize.driver`, `moplace.search`) owns the budget, the archive and the logging. Each searcher is
registered by name in the entry-point group ``moplace.searchers`` of moplace's
``pyproject.toml``, the same way a searcher from another package is
(`moplace.optimize.plugins`), and its module is imported only when it is made: importing this
package imports nothing.
"""
