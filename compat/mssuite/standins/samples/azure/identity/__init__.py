"""ironbus's stand-in for ``azure.identity``, on ``PYTHONPATH`` only when ``run.py --samples`` runs
the suite's samples.

The samples authenticate with ``DefaultAzureCredential()`` (Azure AD). ironbus has shared access
keys only, so the stand-in hands them the SDK's own ``ServiceBusSharedKeyCredential`` for the
root key, as ``devtools_testutils.get_credential()`` does for the tests (with the context-manager
protocol and ``close()`` the samples use): every sample then runs as written, except that the
token it presents is a SAS token. Azure AD itself is not exercised.
"""

from azure.servicebus._base_handler import ServiceBusSharedKeyCredential

import ironbus_target


class DefaultAzureCredential(ServiceBusSharedKeyCredential):
    def __init__(self, **_kwargs):
        super().__init__(ironbus_target.KEY_NAME, ironbus_target.shared_access_key())

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.close()

    def close(self):
        pass


class EnvironmentCredential(DefaultAzureCredential):
    pass
