"""The registries are filled by one loader outside registry.py: no import circle, and a new module registers by
existing."""

import json
import subprocess
import sys


def test_registry_imports_no_family_and_the_loader_registers_every_module():
    code = (
        "import sys\n"
        "import plm_toolkit.core.registry as r\n"
        "assert not [m for m in sys.modules if m.startswith(('plm_toolkit.models.', 'plm_toolkit.objectives.'))]\n"
        "from plm_toolkit.core.catalog import load_all\n"
        "load_all()\n"
        "from plm_toolkit.interop.hf import ADAPTERS\n"
        "import json\n"
        "print(json.dumps([r.MODELS.names(), r.OBJECTIVES.names(), len(r.TASKS.names()), ADAPTERS.names()]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    models, objectives, tasks, adapters = json.loads(done.stdout)
    assert {"bert", "albert", "electra", "transformer_xl", "xlnet", "gpt", "gpt2"} <= set(models)
    assert {"mlm", "mlm_nsp", "mlm_sop", "nsp", "sop", "rtd", "clm", "plm"} <= set(objectives)
    assert tasks >= 13 and {"bert", "roberta", "albert", "electra", "xlnet", "gpt2", "openai-gpt"} <= set(adapters)
