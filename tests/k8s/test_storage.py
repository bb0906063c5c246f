"""Storage classes, FSx team volumes and checkpoint claims."""

from __future__ import annotations

from modules.k8s.names import RETAINED_STORAGE_CLASS, TRAINER_UID
from modules.k8s.storage.spec import (
    checkpoint_volume_manifests,
    ebs_storage_classes,
    fsx_team_volume,
    team_directories_job,
    team_directories_script,
)
from tests.k8s.fixtures import KMS_ARN, TEAMS, eks_args, onprem_args
from tests.k8s.programs import of_kind, registrations

VISION = TEAMS[0]


def test_default_storage_class_is_gp3_encrypted_with_the_stack_key() -> None:
    default, retained = ebs_storage_classes(KMS_ARN)
    assert default["metadata"]["annotations"] == {
        "storageclass.kubernetes.io/is-default-class": "true"
    }
    for sc in (default, retained):
        assert sc["provisioner"] == "ebs.csi.aws.com"
        assert sc["parameters"]["encrypted"] == "true"
        assert sc["parameters"]["kmsKeyId"] == KMS_ARN
        assert sc["parameters"]["type"] == "gp3"
        assert sc["volumeBindingMode"] == "WaitForFirstConsumer"
    assert (default["reclaimPolicy"], retained["reclaimPolicy"]) == ("Delete", "Retain")
    assert "annotations" not in retained["metadata"]


def test_each_team_gets_its_own_volume_of_the_file_system() -> None:
    fsx = eks_args().eks.fsx  # type: ignore[union-attr]
    assert fsx is not None
    volume, claim = fsx_team_volume(VISION, fsx)
    csi = volume["spec"]["csi"]
    assert csi["driver"] == "fsx.csi.aws.com"
    # Lustre subdirectory mount: the team sees only its own directory.
    assert csi["volumeAttributes"]["mountname"] == "abcdefgh/teams/vision"
    assert volume["spec"]["claimRef"] == {"namespace": "team-vision", "name": "checkpoints"}
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert claim["spec"]["storageClassName"] == ""
    volumes = of_kind(registrations("eks"), "PersistentVolume")
    handles = [v["spec"]["csi"]["volumeHandle"] for v in volumes]
    assert len(handles) == len(set(handles)) == 3  # root + one per team


def test_team_directories_are_created_once_for_every_team() -> None:
    script = team_directories_script(["vision", "nlp"])
    assert "mkdir -p /fsx/teams/nlp" in script and "mkdir -p /fsx/teams/vision" in script
    assert f"chown {TRAINER_UID}:{TRAINER_UID} /fsx/teams/vision" in script
    assert "chmod 0770 /fsx/teams/vision" in script
    job = team_directories_job(["vision", "nlp"], "registry/training:1")
    assert job["metadata"]["namespace"] == "gpuplatform-storage"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # Adding a team yields a new Job (Jobs are immutable), not an edit.
    assert team_directories_job(["vision"], "i")["metadata"]["name"] != job["metadata"]["name"]


def test_without_fsx_checkpoints_are_retained_gp3_volumes() -> None:
    (claim,) = checkpoint_volume_manifests(VISION, eks_args(fsx=False))
    assert claim["spec"]["storageClassName"] == RETAINED_STORAGE_CLASS
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "500Gi"


def test_on_prem_checkpoints_use_the_configured_class() -> None:
    (claim,) = checkpoint_volume_manifests(VISION, onprem_args())
    assert claim["spec"]["storageClassName"] == "cephfs"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
