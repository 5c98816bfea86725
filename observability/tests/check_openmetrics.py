#!/usr/bin/env python3
"""Parses Cuvil's OpenMetrics output with prometheus_client's strict OpenMetrics parser.

Usage: check_openmetrics.py DUMP_BINARY  (runs it with --openmetrics, with and without --triton)
"""
import subprocess
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main() -> int:
    dump = sys.argv[1]
    for extra in ([], ["--triton"]):
        text = subprocess.run([dump, "--openmetrics", *extra], check=True, capture_output=True,
                              text=True).stdout
        families = {f.name: f for f in text_string_to_metric_families(text)}
        requests = families["cuvil_inference_requests"]
        assert requests.type == "counter", requests.type
        assert all(s.name == "cuvil_inference_requests_total" for s in requests.samples)
        latency = families["cuvil_request_duration_seconds"]
        assert latency.type == "histogram" and latency.unit == "seconds"
        assert families["cuvil_request_latency_seconds"].type == "summary"
        if extra:
            count = families["nv_inference_count"]
            assert count.type == "unknown", count.type
            assert all(s.name == "nv_inference_count" for s in count.samples)
        print(f"ok {' '.join(extra) or 'default'}: {len(families)} families")
    return 0


if __name__ == "__main__":
    sys.exit(main())
