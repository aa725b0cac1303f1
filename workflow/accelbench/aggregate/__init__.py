"""Aggregation: tables (CSV, Markdown, LaTeX) and figures from result.json files only."""
