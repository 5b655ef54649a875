"""What pages draw with: the sidebar, shared pickers, charts and presentation mode, the landing page's first steps, text made safe for Markdown."""
