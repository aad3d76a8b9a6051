# Shared set-up steps of scripts/test and scripts/run-example (sourced, not run).

setup_venv() {  # setup_venv ".[extra]": create .venv (once) and install the project into it
    # Installing takes seconds even when nothing changed, so a stamp in .venv records the hash
    # of pyproject.toml each extra was installed with; a later call installs again only when
    # that hash changed, the stamp is missing (a fresh .venv) or the install is broken.
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    local hash stamp
    hash="$(.venv/bin/python -c 'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')"
    stamp=".venv/accelflow-installed-$(printf '%s' "$1" | tr -c 'A-Za-z0-9' '_')"
    if ! _installed "$hash" "$stamp" "$1"; then
        rm -f "$stamp"
        .venv/bin/python -m pip install --quiet --upgrade pip
        .venv/bin/python -m pip install --quiet -e "$1"
        echo "$hash" > "$stamp"
    fi
    # An editable install has no bytecode until imports write it, and none are written where
    # PYTHONDONTWRITEBYTECODE is set (CI): every TaskExecutor, forkserver and subtask would
    # compile accelflow again (about 0.1 s of CPU each). Compiled once here, as pip does for
    # a wheel; quick when nothing changed.
    .venv/bin/python -m compileall -q -j 0 src/accelflow >/dev/null || true  # an optimisation only
}

_installed() {  # _installed HASH STAMP SPEC: SPEC was installed from this pyproject.toml
    if [ "$(cat "$2" 2>/dev/null)" != "$1" ]; then
        # "." (no extra) is part of every extra: any stamp with this hash will do
        [ "$3" = "." ] && grep -qsx "$1" .venv/accelflow-installed-* || return 1
    fi
    # the editable install still points at this checkout and its console script exists
    [ -x .venv/bin/accelflow ] && .venv/bin/python -c 'import accelflow, os, sys
sys.exit(not accelflow.__file__.startswith(os.path.abspath("src") + os.sep))' 2>/dev/null
}

FASHION_MNIST_DIR=/usr/share/datasets/fashion-mnist

install_dataset() {  # Debian's dataset-fashion-mnist, where this machine can install it
    if [ -f "$FASHION_MNIST_DIR/t10k-images-idx3-ubyte.gz" ]; then
        return 0
    fi
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
            echo "note: cannot install dataset-fashion-mnist (not root); see README 'Data'" >&2
            return 1
        fi
    fi
    if command -v apt-get >/dev/null; then
        $sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 \
            || { $sudo apt-get update -qq >/dev/null 2>&1 && $sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; } \
            || { echo "note: apt-get could not install dataset-fashion-mnist; see README 'Data'" >&2; return 1; }
    else
        echo "note: no apt-get here; see README 'Data' for getting Fashion-MNIST" >&2
        return 1
    fi
}

install_chromium() {  # Debian's chromium, for the web UI tests (tests/rest); they skip without it
    if [ -x /usr/bin/chromium ]; then
        return 0
    fi
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
            echo "note: cannot install chromium (not root); the browser tests of tests/rest will skip" >&2
            return 1
        fi
    fi
    if command -v apt-get >/dev/null; then
        $sudo apt-get install -y -qq chromium >/dev/null 2>&1 \
            || { $sudo apt-get update -qq >/dev/null 2>&1 && $sudo apt-get install -y -qq chromium >/dev/null 2>&1; } \
            || { echo "note: apt-get could not install chromium; the browser tests of tests/rest will skip" >&2; return 1; }
    else
        echo "note: no apt-get here; install Chromium at /usr/bin/chromium for the browser tests" >&2
        return 1
    fi
}
