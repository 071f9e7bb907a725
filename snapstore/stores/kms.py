"""KmsKey: an AWS KMS key that wraps and unwraps an encrypted repository's data key (docs/format.md
§27 "KMS slots"), through boto3 (any endpoint boto3 reaches: AWS, or moto's server in tests).

The data key never goes to KMS except inside Encrypt (to wrap it once, when a KMS slot is added)
and comes back from Decrypt; the per-object keys are derived locally, so reading and writing cost
no KMS request beyond one Decrypt per store opened.
"""

from __future__ import annotations

from typing import Any

from ..errors import CredentialsError, EncryptionError, MissingDependencyError, StoreError, WrongPassphrase
from ..format import kmsslots


class KmsKey:
    """A KMS key by id, ARN or alias, and the client that calls it.

    Args:
        key: the KMS key (``"arn:aws:kms:...:key/..."``, a key id, or ``"alias/..."``; a non-empty str).
        **client_options: for ``boto3.client("kms", ...)``: ``region_name``, ``endpoint_url``, ...
    Raises:
        EncryptionError: an empty key. MissingDependencyError: boto3 is not installed.
    """

    def __init__(self, key: str, **client_options: Any):
        if not isinstance(key, str) or not key:
            raise EncryptionError("the KMS key must be a non-empty string (a key id, ARN or alias)")
        self.key = key
        try:
            import boto3
        except ImportError as e:  # pragma: no cover - boto3 is a dependency
            raise MissingDependencyError(f"KMS key slots need boto3: {e}") from None
        from botocore.exceptions import BotoCoreError

        parts = key.split(":")
        if "region_name" not in client_options and key.startswith("arn:") and len(parts) > 3 and parts[3]:
            if not boto3.session.Session().region_name:  # a key ARN names its region; the environment none
                client_options["region_name"] = parts[3]
        try:
            self._client = boto3.client("kms", **client_options)
        except BotoCoreError as e:  # e.g. NoRegionError: a key id or alias and no region configured
            raise StoreError(f"KMS key {key}: cannot make a KMS client: {e} (set AWS_REGION, or give the "
                             "key's ARN, which names its region)") from None

    def _call(self, op: str, **kw):
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            return getattr(self._client, op)(**kw)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("InvalidCiphertextException", "IncorrectKeyException", "NotFoundException"):
                raise WrongPassphrase(f"KMS key {self.key} does not open this key slot ({code})") from None
            if code in ("UnrecognizedClientException", "InvalidClientTokenId", "ExpiredTokenException"):
                raise CredentialsError(f"KMS {op} for key {self.key}: credentials refused ({code})") from None
            raise StoreError(f"KMS {op} for key {self.key} failed: {code or e}") from None
        except BotoCoreError as e:
            raise StoreError(f"KMS {op} for key {self.key} failed: {e}") from None

    def wrap(self, data_key: bytes, repo_id: str, key_id: str, slot_id: str) -> bytes:
        """KMS Encrypt of ``data_key`` (32 bytes) with the slot's encryption context; the CiphertextBlob.

        Raises:
            StoreError / CredentialsError: KMS refused or cannot be reached.
        """
        return self._call("encrypt", KeyId=self.key, Plaintext=data_key,
                          EncryptionContext=kmsslots.context(repo_id, key_id, slot_id))["CiphertextBlob"]

    def unwrap(self, blob: bytes, repo_id: str, key_id: str, slot_id: str) -> bytes:
        """KMS Decrypt of a slot's CiphertextBlob ``blob`` under this key and the slot's context.

        Raises:
            WrongPassphrase: KMS does not open it with this key and context (another key, a slot
                moved to another repository, data key id or slot id).
            StoreError / CredentialsError: KMS refused or cannot be reached.
        """
        got = self._call("decrypt", CiphertextBlob=blob, KeyId=self.key,
                         EncryptionContext=kmsslots.context(repo_id, key_id, slot_id))["Plaintext"]
        if len(got) != 32:
            raise WrongPassphrase(f"KMS key {self.key}: the slot does not hold a 32-byte data key")
        return got


__all__ = ["KmsKey"]
