"""The HTML report: its answers, findings, tables of the sweep itself, figures and the page that holds them."""
