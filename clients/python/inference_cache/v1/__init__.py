"""Message and service code generated from api/inferencecache/v1/inferencecache.proto
(``make proto-python``; committed, see clients/python/README.md)."""
