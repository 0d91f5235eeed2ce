import sys

from sinklib.cli import main

if __name__ == "__main__":
    sys.exit(main())
