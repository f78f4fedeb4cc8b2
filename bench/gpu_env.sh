# Sourced by the bench's device scripts (bash): the GPU image has no pydantic, so the wheels
# carried in .whl (see bench/h200_wide.sh) go into /tmp/site, and PYTHONPATH names it and the
# clone; without .whl, the clone alone. Exits the calling script when the install fails.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
