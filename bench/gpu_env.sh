# Sourced by the bench's device scripts (bash): the GPU image has no pydantic, so the wheels
# carried in .whl (see bench/h200_wide.sh) go into /tmp/site, and PYTHONPATH names it and the
# clone; without .whl, the clone alone. pydantic_core needs typing_extensions >= 4.16: where the
# image's is older, the one carried in .whl/ifold goes in too. Exits the calling script when the
# install fails.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  have=$(python3 -c "import importlib.metadata as m; print(m.version('typing_extensions'))" 2>/dev/null)
  if [ -d .whl/ifold ] && python3 -c "import sys; v=tuple(int(x) for x in '$have'.split('.')[:2]); sys.exit(v >= (4, 16))"; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ifold/*.whl || exit 1
    echo "typing_extensions $have < 4.16: carried 4.16.0"
  fi
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
