"""Built-in auth plugins: the ``direct`` and ``trusted_proxy`` providers, the ``ecpds``
stream authoriser, and what they share (header parsing, JWT validation, HTTP clients)."""
