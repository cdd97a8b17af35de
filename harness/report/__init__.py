"""Reports: sweep tables per batch size, the energy band, passes, figures and the HTML page."""
