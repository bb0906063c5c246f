"""The controls the rules map to, written once so every report cites them alike; the
rule catalogue (policies/catalogue.yaml) names them by these constants' names.

Sources: UAE Federal Decree-Law No. 45 of 2021 on the Protection of Personal Data
(PDPL); ISO/IEC 27001:2022 Annex A; the CIS Amazon EKS Benchmark (section numbers of
v1.1.0 and later); the CBUAE Outsourcing Regulation for Banks (Circular 14/2021), whose
Article 6 keeps the Master System of Record and customers' Confidential Data in the UAE.
The mapping is the pack authors' reading, for reviewers to confirm, not legal advice.
"""

from __future__ import annotations

# UAE PDPL (Federal Decree-Law 45/2021)
PDPL_20_SECURITY = "UAE PDPL Art. 20 (security of personal data)"
PDPL_22_TRANSFER = "UAE PDPL Art. 22 (cross-border transfer, adequate protection)"
PDPL_23_TRANSFER = "UAE PDPL Art. 23 (cross-border transfer without adequate protection)"
PDPL_7_CONTROLLER = "UAE PDPL Art. 7 (controller's obligations)"

# CBUAE Outsourcing Regulation for Banks (Circular 14/2021)
CBUAE_6_1 = "CBUAE Outsourcing Reg. Art. 6.1 (Master System of Record kept in the UAE)"
CBUAE_6_3 = "CBUAE Outsourcing Reg. Art. 6.3 (Confidential Data not shared outside the UAE)"

# ISO/IEC 27001:2022 Annex A
ISO_5_9 = "ISO/IEC 27001:2022 A.5.9 (inventory of information and other assets)"
ISO_5_12 = "ISO/IEC 27001:2022 A.5.12 (classification of information)"
ISO_5_13 = "ISO/IEC 27001:2022 A.5.13 (labelling of information)"
ISO_5_15 = "ISO/IEC 27001:2022 A.5.15 (access control)"
ISO_5_18 = "ISO/IEC 27001:2022 A.5.18 (access rights)"
ISO_5_23 = "ISO/IEC 27001:2022 A.5.23 (information security for use of cloud services)"
ISO_5_31 = "ISO/IEC 27001:2022 A.5.31 (legal, statutory, regulatory requirements)"
ISO_5_34 = "ISO/IEC 27001:2022 A.5.34 (privacy and protection of PII)"
ISO_8_2 = "ISO/IEC 27001:2022 A.8.2 (privileged access rights)"
ISO_8_3 = "ISO/IEC 27001:2022 A.8.3 (information access restriction)"
ISO_8_9 = "ISO/IEC 27001:2022 A.8.9 (configuration management)"
ISO_8_12 = "ISO/IEC 27001:2022 A.8.12 (data leakage prevention)"
ISO_8_13 = "ISO/IEC 27001:2022 A.8.13 (information backup)"
ISO_8_19 = "ISO/IEC 27001:2022 A.8.19 (installation of software on operational systems)"
ISO_8_20 = "ISO/IEC 27001:2022 A.8.20 (networks security)"
ISO_8_22 = "ISO/IEC 27001:2022 A.8.22 (segregation of networks)"
ISO_8_24 = "ISO/IEC 27001:2022 A.8.24 (use of cryptography)"

# CIS Amazon EKS Benchmark
CIS_EKS_4_2_1 = "CIS EKS 4.2.1 (minimize admission of privileged containers)"
CIS_EKS_4_2_2 = "CIS EKS 4.2.2 (minimize sharing the host process ID namespace)"
CIS_EKS_4_2_3 = "CIS EKS 4.2.3 (minimize sharing the host IPC namespace)"
CIS_EKS_4_2_4 = "CIS EKS 4.2.4 (minimize sharing the host network namespace)"
CIS_EKS_4_2_5 = "CIS EKS 4.2.5 (minimize allowPrivilegeEscalation)"
CIS_EKS_4_2_6 = "CIS EKS 4.2.6 (minimize admission of root containers)"
CIS_EKS_4_3_2 = "CIS EKS 4.3.2 (all namespaces have network policies defined)"
CIS_EKS_4_6_1 = "CIS EKS 4.6.1 (namespaces as administrative boundaries)"
CIS_EKS_4_6_2 = "CIS EKS 4.6.2 (security context for pods and containers)"
CIS_EKS_4_6_3 = "CIS EKS 4.6.3 (the default namespace should not be used)"
CIS_EKS_5_1_4 = "CIS EKS 5.1.4 (minimize container registries to approved ones)"
CIS_EKS_5_3_1 = "CIS EKS 5.3.1 (Kubernetes secrets encrypted with KMS CMKs)"
CIS_EKS_5_4_1 = "CIS EKS 5.4.1 (restrict access to the control plane endpoint)"
CIS_EKS_5_4_2 = "CIS EKS 5.4.2 (private endpoint enabled, public access disabled)"
CIS_EKS_5_4_3 = "CIS EKS 5.4.3 (clusters with private nodes)"
CIS_EKS_3_x_NODES = "CIS EKS 3 (worker node configuration)"
