"""The upstream side: the HTTP client behind a transport seam, and the SSE decoder."""
