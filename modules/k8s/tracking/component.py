"""`Tracking`: installs the MLflow tracking server (and on premises its CloudNativePG
database) with the values and objects that `manifests` builds: its certificate and TLS
Service, its fences, the teams' MLflow users and their credentials."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import pulumi

from modules.component_base import Outputs
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.tracking.manifests import (
    ADMIN_INI_SECRET,
    ADMIN_SECRET,
    AUTH_DATABASE_SECRET,
    CNPG_NAMESPACE,
    CNPG_NS,
    DATABASE_SECRET,
    RELEASE,
    TRACKING_NAMESPACE,
    TRACKING_NS,
    TRACKING_URI,
    StoreSettings,
    artifact_claim,
    backup_ca_secret,
    backup_credentials_secret,
    cloudnative_pg_values,
    cnpg_network_policies,
    credentials_secret,
    database_ca_configmap,
    database_cluster,
    database_host,
    database_pod_monitor,
    database_secret_name,
    ini_safe_admin,
    mlflow_values,
    scheduled_backup,
    server_network_policies,
    service_monitor,
    team_credentials_secret,
    team_egress_policy,
    team_users_secret,
    tls_certificate,
    tls_service,
    url_safe,
    user_sync_configmap,
)
from modules.k8s.tracking.spec import TrackingInputs, TrackingSpec
from modules.k8s.tracking.users import team_password, users_json
from modules.k8s.versions import CLOUDNATIVE_PG, MLFLOW


class Tracking(PlatformService):
    """The MLflow tracking server, its database on premises, and its fences."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        spec, inputs = args.tracking, args.tracking_inputs
        if spec is None or inputs is None:  # KubernetesPlatformArgs checks the pair
            raise ValueError("the tracking server needs TrackingSpec and TrackingInputs")
        vpc_cidr = args.eks.vpc_cidr if args.eks is not None else None
        ns, *fences = self.fenced_namespace(
            TRACKING_NS, server_network_policies(args.network, vpc_cidr, spec.database_backup)
        )
        # The endpoint's certificate (the cluster CA's issuer is among ``waits_for``):
        # the server pods mount it, so it exists before the release waits for them.
        certificate = self.add(tls_certificate(), [ns, *self.waits_for])
        ready: list[pulumi.Resource] = [ns, certificate, *fences, *self.waits_for]
        admin = pulumi.Output.from_input(inputs.admin_password)
        ready += [
            self.add(credentials_secret(name, spec.admin_username, password), [ns])
            for name, password in (
                (ADMIN_SECRET, admin),
                (ADMIN_INI_SECRET, admin.apply(ini_safe_admin)),
            )
        ]
        store = inputs.store
        if store is not None:
            user, password = store.database_username, store.database_password
            ready.append(self.add(credentials_secret(DATABASE_SECRET, user, password), [ns]))
            url_password = pulumi.Output.from_input(password).apply(url_safe)
            ready.append(
                self.add(credentials_secret(AUTH_DATABASE_SECRET, user, url_password), [ns])
            )
            # The RDS authorities every database client in the namespace verifies with.
            ready.append(self.add(database_ca_configmap(store.database_ca), [ns]))
            values: pulumi.Input[Mapping[str, Any]] = pulumi.Output.all(
                store.database_host, store.bucket_name, store.storage_key_arn
            ).apply(
                lambda resolved: mlflow_values(
                    spec,
                    StoreSettings(
                        database_host=str(resolved[0]),
                        database_secret=DATABASE_SECRET,
                        auth_database_secret=AUTH_DATABASE_SECRET,
                        bucket=str(resolved[1]),
                        artifact_prefix=store.artifact_prefix.strip("/"),
                        kms_key_arn=str(resolved[2]),
                        region=args.site.region,
                        on_aws=True,
                    ),
                )
            )
        else:
            onprem = args.onprem
            if onprem is None:  # checked by KubernetesPlatformArgs
                raise ValueError("an on-premises tracking server needs OnPremSpec")
            cnpg_fenced = self.fenced_namespace(CNPG_NS, cnpg_network_policies(args.network))
            operator = self.install(
                "cloudnative-pg",
                CLOUDNATIVE_PG,
                CNPG_NAMESPACE,
                cloudnative_pg_values(spec),
                [*cnpg_fenced, *self.waits_for],
            )
            # Backups to the site's object store: its access key (secret config values)
            # and CA bundle exist before the cluster archives its first WAL file.
            backup_secrets = self._backup_secrets(spec, inputs, ns)
            # The database and the artifacts are data: protected like checkpoint claims.
            database = self.add(
                database_cluster(spec, onprem.storage_class),
                [ns, operator, *backup_secrets],
                protect=True,
            )
            ready.append(database)
            if spec.database_backup is not None:
                self.add(scheduled_backup(spec.database_backup), [database])
            claim = artifact_claim(spec, onprem.checkpoint_class, onprem.checkpoint_access_mode)
            ready.append(self.add(claim, [ns], protect=True))
            self.add(database_pod_monitor(), [ns, *self.waits_for])
            values = mlflow_values(
                spec,
                StoreSettings(
                    database_host=database_host(on_aws=False),
                    database_secret=database_secret_name(on_aws=False),
                ),
            )
        for team, team_ns in self.team_namespaces.items():
            self.add(team_egress_policy(team), [team_ns])
        users_secret, sync_script = self._team_users(
            args,
            inputs.team_passwords,
            admin,
            ns,
            services=inputs.service_passwords,
        )
        ready += [users_secret, sync_script]
        self.release = self.install(RELEASE, MLFLOW, TRACKING_NAMESPACE, values, ready)
        endpoint = self.add(tls_service(), [ns])
        self.add(
            service_monitor(args.monitoring.scrape_interval_seconds),
            [self.release, endpoint, *self.waits_for],
        )
        return {"trackingUri": TRACKING_URI, "users": self.users}

    def _backup_secrets(
        self,
        spec: TrackingSpec,
        inputs: TrackingInputs,
        ns: pulumi.Resource,
    ) -> list[pulumi.Resource]:
        """The database backups' Secrets: the object store's access key (as secrets) and
        the site CA bundle where given; none without backups."""
        backup = spec.database_backup
        if backup is None:
            return []
        if inputs.backup_credentials is None:  # KubernetesPlatformArgs checks the pair
            raise ValueError("database backups need the object store's access key")
        access_key_id, secret_access_key = (
            pulumi.Output.secret(value) for value in inputs.backup_credentials
        )
        secrets: list[pulumi.Resource] = [
            self.add(backup_credentials_secret(access_key_id, secret_access_key), [ns])
        ]
        if backup.endpoint_ca:
            secrets.append(self.add(backup_ca_secret(backup), [ns]))
        return secrets

    def _team_users(
        self,
        args: KubernetesPlatformArgs,
        given: Mapping[str, pulumi.Input[str]],
        admin: pulumi.Output[str],
        ns: pulumi.Resource,
        *,
        services: Mapping[str, pulumi.Input[str]],
    ) -> tuple[pulumi.Resource, pulumi.Resource]:
        """Each team's MLflow credentials in its namespace, and what the server pod's
        user-sync sidecar mounts: every team's and platform service user's password
        (``services``: user name -> password; their Secrets are the services' own) and
        the script. Returns the latter (the release waits for them); ``self.users`` is
        the user names the users file holds (read back from it: not secret)."""
        passwords: dict[str, pulumi.Output[str]] = {}
        for team in args.teams:
            password = given.get(team.name)
            passwords[team.name] = pulumi.Output.secret(
                pulumi.Output.from_input(password)
                if password is not None
                else admin.apply(functools.partial(_derived, team.name))
            )
            self.add(
                team_credentials_secret(team.name, passwords[team.name]),
                [self.team_namespaces[team.name]],
            )
        service_outputs = {u: pulumi.Output.secret(p) for u, p in services.items()}
        users = pulumi.Output.all(
            pulumi.Output.all(**passwords), pulumi.Output.all(**service_outputs)
        ).apply(_users_file)
        self.users: pulumi.Output[list[str]] = pulumi.Output.unsecret(users.apply(_user_names))
        return (
            self.add(team_users_secret(users), [ns]),
            self.add(user_sync_configmap(), [ns]),
        )


def _users_file(resolved: list[Any]) -> str:
    # Output.all() of no keyword resolves to [] (a stack without teams or services).
    teams, services = resolved
    return users_json(dict(teams or {}), dict(services or {}))


def _user_names(users_file: str) -> list[str]:
    return sorted(json.loads(users_file))


def _derived(team: str, admin_password: str) -> str:
    return team_password(admin_password, team)
