"""``python -m relpos_core.decoding --bench``: the decode throughput benchmark (``bench.main``);
``python -m relpos_core.decoding --scale``: one decode step of every cache layout (``scale.main``)."""
import sys

if __name__ == "__main__":
    if "--scale" in sys.argv[1:]:
        from relpos_core.decoding.scale import main as scale_main

        scale_main([a for a in sys.argv[1:] if a != "--scale"])
    else:
        from relpos_core.decoding.bench import main

        main()
