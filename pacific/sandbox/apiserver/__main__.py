import sys

from pacific.sandbox.apiserver.main import main

sys.exit(main())
