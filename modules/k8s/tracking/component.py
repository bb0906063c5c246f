"""`Tracking`: installs the MLflow tracking server (and on premises its CloudNativePG
database) with the values and objects that `manifests` builds: its certificate and TLS
Service, its fences, the teams' MLflow users and their credentials."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.common import helm_release, register, register_namespace
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


class Tracking(pulumi.ComponentResource):
    """The MLflow tracking server, its database on premises, and its fences."""

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        team_namespaces: Mapping[str, pulumi.Resource],
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:Tracking", name, None, opts)
        spec, inputs, provider = args.tracking, args.tracking_inputs, args.provider
        if spec is None or inputs is None:  # KubernetesPlatformArgs checks the pair
            raise ValueError("the tracking server needs TrackingSpec and TrackingInputs")
        ns = register(TRACKING_NS.manifest(args.kubernetes_version), self, provider)
        vpc_cidr = args.eks.vpc_cidr if args.eks is not None else None
        fences = [
            register(manifest, self, provider, depends_on=[ns])
            for manifest in server_network_policies(args.network, vpc_cidr, spec.database_backup)
        ]
        # The endpoint's certificate (the cluster CA's issuer is among ``depends_on``):
        # the server pods mount it, so it exists before the release waits for them.
        certificate = register(tls_certificate(), self, provider, depends_on=[ns, *depends_on])
        ready: list[pulumi.Resource] = [ns, certificate, *fences, *depends_on]
        admin = pulumi.Output.from_input(inputs.admin_password)
        ready += [
            register(
                credentials_secret(name, spec.admin_username, password),
                self,
                provider,
                depends_on=[ns],
            )
            for name, password in (
                (ADMIN_SECRET, admin),
                (ADMIN_INI_SECRET, admin.apply(ini_safe_admin)),
            )
        ]
        store = inputs.store
        if store is not None:
            ready.append(
                register(
                    credentials_secret(
                        DATABASE_SECRET, store.database_username, store.database_password
                    ),
                    self,
                    provider,
                    depends_on=[ns],
                )
            )
            ready.append(
                register(
                    credentials_secret(
                        AUTH_DATABASE_SECRET,
                        store.database_username,
                        pulumi.Output.from_input(store.database_password).apply(url_safe),
                    ),
                    self,
                    provider,
                    depends_on=[ns],
                )
            )
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
                    ),
                )
            )
        else:
            onprem = args.onprem
            if onprem is None:  # checked by KubernetesPlatformArgs
                raise ValueError("an on-premises tracking server needs OnPremSpec")
            cnpg_fenced = register_namespace(
                CNPG_NS.manifest(args.kubernetes_version),
                cnpg_network_policies(args.network),
                self,
                provider,
            )
            operator = helm_release(
                "cloudnative-pg",
                CLOUDNATIVE_PG,
                CNPG_NAMESPACE,
                values=cloudnative_pg_values(),
                parent=self,
                provider=provider,
                depends_on=[*cnpg_fenced, *depends_on],
            )
            # Backups to the site's object store: its access key (secret config values)
            # and CA bundle exist before the cluster archives its first WAL file.
            backup_secrets = self._backup_secrets(spec, inputs, ns, provider)
            # The database and the artifacts are data: protected like checkpoint claims.
            database = register(
                database_cluster(spec, onprem.storage_class),
                self,
                provider,
                depends_on=[ns, operator, *backup_secrets],
                protect=True,
            )
            ready.append(database)
            if spec.database_backup is not None:
                register(
                    scheduled_backup(spec.database_backup),
                    self,
                    provider,
                    depends_on=[database],
                )
            ready.append(
                register(
                    artifact_claim(spec, onprem.checkpoint_class, onprem.checkpoint_access_mode),
                    self,
                    provider,
                    depends_on=[ns],
                    protect=True,
                )
            )
            register(database_pod_monitor(), self, provider, depends_on=[ns, *depends_on])
            values = mlflow_values(
                spec,
                StoreSettings(
                    database_host=database_host(on_aws=False),
                    database_secret=database_secret_name(on_aws=False),
                    # CloudNativePG serves TLS with its own CA; the server encrypts
                    # without verifying it (the CA is not mounted into the server pod).
                    ssl_mode="require",
                ),
            )
        for team, team_ns in team_namespaces.items():
            register(team_egress_policy(team), self, provider, depends_on=[team_ns])
        users_secret, sync_script = self._team_users(
            args,
            inputs.team_passwords,
            admin,
            team_namespaces,
            ns,
            services=inputs.service_passwords,
        )
        ready += [users_secret, sync_script]
        self.release = helm_release(
            RELEASE,
            MLFLOW,
            TRACKING_NAMESPACE,
            values=values,
            parent=self,
            provider=provider,
            depends_on=ready,
        )
        endpoint = register(tls_service(), self, provider, depends_on=[ns])
        register(
            service_monitor(args.monitoring.scrape_interval_seconds),
            self,
            provider,
            depends_on=[self.release, endpoint, *depends_on],
        )
        self.register_outputs({"trackingUri": TRACKING_URI, "users": self.users})

    def _backup_secrets(
        self,
        spec: TrackingSpec,
        inputs: TrackingInputs,
        ns: pulumi.Resource,
        provider: k8s.Provider,
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
            register(
                backup_credentials_secret(access_key_id, secret_access_key),
                self,
                provider,
                depends_on=[ns],
            )
        ]
        if backup.endpoint_ca:
            secrets.append(register(backup_ca_secret(backup), self, provider, depends_on=[ns]))
        return secrets

    def _team_users(
        self,
        args: KubernetesPlatformArgs,
        given: Mapping[str, pulumi.Input[str]],
        admin: pulumi.Output[str],
        team_namespaces: Mapping[str, pulumi.Resource],
        ns: pulumi.Resource,
        *,
        services: Mapping[str, pulumi.Input[str]],
    ) -> tuple[pulumi.Resource, pulumi.Resource]:
        """Each team's MLflow credentials in its namespace, and what the server pod's
        user-sync sidecar mounts: every team's and platform service user's password
        (``services``: user name -> password; their Secrets are the services' own) and
        the script. Returns the latter (the release waits for them); ``self.users`` is
        the user names the users file holds (read back from it: not secret)."""
        provider = args.provider
        passwords: dict[str, pulumi.Output[str]] = {}
        for team in args.teams:
            password = given.get(team.name)
            passwords[team.name] = pulumi.Output.secret(
                pulumi.Output.from_input(password)
                if password is not None
                else admin.apply(functools.partial(_derived, team.name))
            )
            register(
                team_credentials_secret(team.name, passwords[team.name]),
                self,
                provider,
                depends_on=[team_namespaces[team.name]],
            )
        service_outputs = {u: pulumi.Output.secret(p) for u, p in services.items()}
        users = pulumi.Output.all(
            pulumi.Output.all(**passwords), pulumi.Output.all(**service_outputs)
        ).apply(_users_file)
        self.users: pulumi.Output[list[str]] = pulumi.Output.unsecret(users.apply(_user_names))
        return (
            register(team_users_secret(users), self, provider, depends_on=[ns]),
            register(user_sync_configmap(), self, provider, depends_on=[ns]),
        )


def _users_file(resolved: list[Any]) -> str:
    # Output.all() of no keyword resolves to [] (a stack without teams or services).
    teams, services = resolved
    return users_json(dict(teams or {}), dict(services or {}))


def _user_names(users_file: str) -> list[str]:
    return sorted(json.loads(users_file))


def _derived(team: str, admin_password: str) -> str:
    return team_password(admin_password, team)
