"""``python -m relpos_core.decoding --bench``: the decode throughput benchmark (``bench.main``)."""
from relpos_core.decoding.bench import main

if __name__ == "__main__":
    main()
