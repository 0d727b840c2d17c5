"""A sampling script of your own, for the golden job scripts: prints text from the newest checkpoint."""
import os
import sys

print("samples of", os.environ.get("LLMTRAIN_CHECKPOINT_DIR"), sys.argv[1:])
