"""Aggregation: tables (CSV, Markdown, LaTeX) and figures from result.json files only.

The one matplotlib backend setting of the package: figures are written to files, never shown, so the non-interactive
Agg backend is chosen here, before any figure exists (every tables module imports this package's figures first).
"""

import matplotlib

matplotlib.use("Agg")
