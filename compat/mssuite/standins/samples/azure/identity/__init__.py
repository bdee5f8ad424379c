"""ironbus's stand-in for ``azure.identity``, on ``PYTHONPATH`` only when ``run.py --samples`` runs
the suite's samples.

The samples authenticate with ``DefaultAzureCredential()`` (Azure AD). ironbus has shared access
keys only, so the stand-in hands them the SDK's own ``ServiceBusSharedKeyCredential`` for the
root key, as ``devtools_testutils.get_credential()`` does for the tests: every sample then runs
as written, except that the token it presents is a SAS token. Azure AD itself is not exercised.
"""

import ironbus_target


def DefaultAzureCredential(**_kwargs):  # noqa: N802 (the name the samples import)
    return ironbus_target.credential()


def EnvironmentCredential(**_kwargs):  # noqa: N802
    return ironbus_target.credential()
