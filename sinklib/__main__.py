import sys

from sinklib.pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
