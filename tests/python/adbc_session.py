"""An analyst's session with dp-server through the ADBC Flight SQL driver (PyPI
adbc-driver-flightsql, pyarrow), as tests/server.rs runs it.

usage: adbc_session.py URI USER PASSWORD session
       adbc_session.py URI USER PASSWORD tls ROOT_CERT.pem

Prints one `key=value` line per fact; the Rust test asserts them.
"""

import sys

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
from adbc_driver_flightsql import DatabaseOptions


def connect(uri, user, password, root_cert=None):
    kwargs = {}
    if root_cert is not None:
        with open(root_cert) as f:
            kwargs[DatabaseOptions.TLS_ROOT_CERTS.value] = f.read()
    # No transactions on the server: autocommit, as docs/server.md's session does.
    return flight_sql.connect(
        uri, db_kwargs={"username": user, "password": password, **kwargs}, autocommit=True
    )


def one_line(error):
    return " ".join(str(error).split())


def session(uri, user, password):
    try:
        with connect(uri, user, password + "-wrong") as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()
        print("bad_password=accepted")
    except Exception:
        print("bad_password=refused")

    with connect(uri, user, password) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT dp_rr_ci(outcome, exposed, 1.0) AS rr FROM visits")
            table = cur.fetch_arrow_table()
            print("rr_columns=" + ",".join(table.column_names))
            rr = table.column("rr")
            print("rr_fields=" + ",".join(f.name for f in rr.type))
            value = rr[0].as_py()
            print(f"rr_lower={value['lower']}")
            print(f"rr_upper={value['upper']}")
        with conn.cursor() as cur:
            try:
                cur.execute("SELECT * FROM visits")
                cur.fetch_arrow_table()
                print("select_star=answered")
            except Exception as e:
                print("select_star=" + one_line(e))
        # Prepared statements' parameters come as a batch whose types the analyst chooses:
        # each is bounded as a literal of its type, refused before the charge.
        parameters = {
            "string": ("region = $1", pa.array(["east"])),
            "dictionary": ("region = $1", pa.array(["east"]).dictionary_encode()),
            "dictionary_fixed_binary": (
                "$1 IS NULL",
                pa.DictionaryArray.from_arrays(
                    pa.array([0], pa.int8()), pa.array([None], pa.binary(1_000_000))
                ),
            ),
            "fixed_binary": ("$1 IS NULL", pa.nulls(1, pa.binary(1_000_000))),
        }
        for name, (predicate, value) in parameters.items():
            with conn.cursor() as cur:
                try:
                    cur.execute(
                        f"SELECT dp_count(outcome, 0.5) AS n FROM visits WHERE {predicate}",
                        parameters=pa.record_batch([value], names=["$1"]),
                    )
                    print(f"parameter_{name}=answered {len(cur.fetchall())} row")
                except Exception as e:
                    print(f"parameter_{name}=" + one_line(e))
        objects = conn.adbc_get_objects(depth="tables", db_schema_filter="public").read_all()
        names = []
        for catalog in objects.to_pylist():
            for schema in catalog["catalog_db_schemas"] or []:
                for table in schema["db_schema_tables"] or []:
                    names.append(table["table_name"])
        print("tables=" + ",".join(sorted(names)))


def tls(uri, user, password, root_cert):
    try:
        with connect(uri, user, password, root_cert) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1 AS one")
            print(f"tls_query={cur.fetchall()[0][0]}")
    except Exception as e:
        print("tls_query=refused")
        print("tls_error=" + one_line(e))


if __name__ == "__main__":
    uri, user, password, mode = sys.argv[1:5]
    if mode == "session":
        session(uri, user, password)
    else:
        tls(uri, user, password, sys.argv[5])
