"""Classical-ML real models (ai.onnx.ml): scikit-learn pipelines converted by
skl2onnx, LightGBM and XGBoost models converted by onnxmltools, each trained
with a fixed seed on small synthetic data, with ONNX Runtime's outputs on
fixed inputs as the reference (python/requirements-ml.txt pins every
package).

    .venv-ml/bin/python python/realmodels/ml.py [--out .cache/realmodels] [--only NAME,...] [--small]

Cases are written as OUT/cases/<name>.<format>/ with model.onnx,
in.<k>.<input>.npy, ref.<k>.<output>.npy and case.json, the layout of
python/realmodels/generate.py, so `make realmodels` (check.py) runs them
through `xserve run` and `xserve serve`. --small writes the small set that
`go test ./internal/realmodels` and cmd/xserve's tests run (committed under
testdata/mlmodels: a few kilobytes each, made by `make ml-fixtures`).

Outputs: string tensors are saved as numpy unicode arrays ('<U'); ZipMap's
sequence of maps is saved in xserve's tensor form, a float32 [N, C] matrix
whose column j is the probability of the ZipMap's j-th class label (see
docs/ONNX-ML.md). ONNX Runtime runs on one thread, so that tree sums are
added in tree order, as ONNX Runtime's sequential path adds them.
"""

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from packaged import save_case, short  # noqa: E402

warnings.filterwarnings("ignore")
SEED = 0
FEATURES = 8
REF_ROWS = 7


def rng(seed=SEED):
    return np.random.default_rng(seed)


def classification(n=300, classes=3, features=FEATURES, seed=SEED):
    from sklearn.datasets import make_classification
    x, y = make_classification(n, features, n_informative=5, n_classes=classes, random_state=seed)
    return x.astype(np.float32), y


def regression(n=300, features=FEATURES, seed=SEED):
    from sklearn.datasets import make_regression
    x, y = make_regression(n, features, noise=5.0, random_state=seed)
    return x.astype(np.float32), y.astype(np.float32)


def ref_rows(features=FEATURES, rows=REF_ROWS, seed=1):
    """Reference inputs: fresh rows (not the training data), one with a NaN
    where a model handles missing values."""
    return rng(seed).standard_normal((rows, features)).astype(np.float32) * 1.5


def skl(model, x, **options):
    from skl2onnx import to_onnx
    return to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}, options=options or None)


def float_input(features=FEATURES):
    from skl2onnx.common.data_types import FloatTensorType
    return [("input", FloatTensorType([None, features]))]


# ---- builders: name -> (format, source, builder(small) -> (onnx model, {input: array}))

def scaler_logreg(small):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    x, y = classification()
    m = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    return skl(m, x, zipmap=False), {"X": ref_rows()}


def random_forest(small):
    from sklearn.ensemble import RandomForestClassifier
    x, y = classification()
    m = RandomForestClassifier(n_estimators=4 if small else 50, max_depth=4 if small else 8, random_state=SEED).fit(x, y)
    return skl(m, x, zipmap=False), {"X": ref_rows()}


def gradient_boosting_regressor(small):
    from sklearn.ensemble import GradientBoostingRegressor
    x, y = regression()
    m = GradientBoostingRegressor(n_estimators=5 if small else 100, max_depth=3, random_state=SEED).fit(x, y)
    return skl(m, x), {"X": ref_rows()}


def svc_probability(small):
    from sklearn.svm import SVC
    x, y = classification(n=120 if small else 300)
    m = SVC(probability=True, random_state=SEED).fit(x, y)
    return skl(m, x, zipmap=False), {"X": ref_rows()}


def svr(small):
    from sklearn.svm import SVR
    x, y = regression(n=80 if small else 300)
    m = SVR(C=10.0).fit(x, y)
    return skl(m, x), {"X": ref_rows()}


def onehot_columns(small):
    """A ColumnTransformer over a pandas frame: one-hot of two string
    columns and scaling of two float columns (one model input each), then a
    logistic regression with string class labels and skl2onnx's default
    ZipMap output."""
    import pandas as pd
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    colors, sizes = np.array(["red", "green", "blue", "yellow"]), np.array(["S", "M", "L"])

    def frame(n, r):
        return pd.DataFrame({"color": colors[r.integers(0, 4, n)], "size": sizes[r.integers(0, 3, n)],
                             "x0": r.standard_normal(n).astype(np.float32), "x1": r.standard_normal(n).astype(np.float32)})
    r = rng()
    df = frame(200, r)
    score = df.x0 + (df.color == "red") * 1.5 - (df["size"] == "L") + 0.3 * r.standard_normal(200)
    y = np.where(score > 0.5, "yes", np.where(score < -0.5, "no", "maybe"))
    pipe = Pipeline([("ct", ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), ["color", "size"]),
                                               ("num", StandardScaler(), ["x0", "x1"])])),
                     ("lr", LogisticRegression(max_iter=500))]).fit(df, y)
    types = [("color", StringTensorType([None, 1])), ("size", StringTensorType([None, 1])),
             ("x0", FloatTensorType([None, 1])), ("x1", FloatTensorType([None, 1]))]
    m = convert_sklearn(pipe, initial_types=types, target_opset={"": 17, "ai.onnx.ml": 3})
    ref = frame(REF_ROWS, rng(1))
    ref.loc[2, "color"] = "purple"  # a category the encoder never saw: all zeros
    feeds = {"color": ref[["color"]].to_numpy().astype(str), "size": ref[["size"]].to_numpy().astype(str),
             "x0": ref[["x0"]].to_numpy(), "x1": ref[["x1"]].to_numpy()}
    return m, feeds


def zipmap_classifier(small):
    """A decision tree with string class labels converted with skl2onnx's
    defaults: a string label output and ZipMap's sequence of maps."""
    from sklearn.tree import DecisionTreeClassifier
    x, y = classification()
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    m = DecisionTreeClassifier(max_depth=4 if small else 8, random_state=SEED).fit(x, names)
    return skl(m, x), {"X": ref_rows()}


def preprocess_linear(small):
    """SimpleImputer, Binarizer-free scaling and L2 normalization, then a
    linear regression: Imputer, Scaler, Normalizer, LinearRegressor."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, Normalizer
    x, y = regression()
    x[::7, 2] = np.nan
    m = make_pipeline(SimpleImputer(), MinMaxScaler(), Normalizer(), LinearRegression()).fit(x, y)
    xr = ref_rows()
    xr[1, 2] = np.nan
    return skl(m, x), {"X": xr}


def binarizer_logreg(small):
    """Imputer, Binarizer and a binary logistic regression (one score:
    ONNX Runtime's [1 - p, p])."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Binarizer
    x, y = classification(classes=2)
    m = make_pipeline(SimpleImputer(strategy="median"), Binarizer(threshold=0.1), LogisticRegression()).fit(x, y)
    return skl(m, x, zipmap=False), {"X": ref_rows()}


def hist_gradient_boosting(small):
    """HistGradientBoostingClassifier trained with missing values: trees
    whose NaN inputs follow nodes_missing_value_tracks_true."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    x, y = classification()
    x[::5, 1] = np.nan
    m = HistGradientBoostingClassifier(max_iter=5 if small else 50, random_state=SEED).fit(x, y)
    xr = ref_rows()
    xr[::2, 1] = np.nan
    return skl(m, x, zipmap=False), {"X": xr}


def lgbm_input(features=FEATURES):
    from onnxmltools.convert.common.data_types import FloatTensorType
    return [("input", FloatTensorType([None, features]))]


def lightgbm_classifier(small):
    import lightgbm
    import onnxmltools
    x, y = classification()
    m = lightgbm.LGBMClassifier(n_estimators=5 if small else 100, num_leaves=7 if small else 31, random_state=SEED,
                                verbose=-1, n_jobs=1).fit(x, y)
    return onnxmltools.convert_lightgbm(m, initial_types=lgbm_input(), zipmap=False, target_opset=15), {"input": ref_rows()}


def lightgbm_binary(small):
    import lightgbm
    import onnxmltools
    x, y = classification(classes=2)
    m = lightgbm.LGBMClassifier(n_estimators=5 if small else 100, num_leaves=7 if small else 31, random_state=SEED,
                                verbose=-1, n_jobs=1).fit(x, y)
    return onnxmltools.convert_lightgbm(m, initial_types=lgbm_input(), zipmap=False, target_opset=15), {"input": ref_rows()}


def lightgbm_regressor(small):
    import lightgbm
    import onnxmltools
    x, y = regression()
    m = lightgbm.LGBMRegressor(n_estimators=5 if small else 100, num_leaves=7 if small else 31, random_state=SEED,
                               verbose=-1, n_jobs=1).fit(x, y)
    return onnxmltools.convert_lightgbm(m, initial_types=lgbm_input(), target_opset=15), {"input": ref_rows()}


def lightgbm_500(small):
    """The tree-ensemble benchmark's model (docs/BENCHMARKS.md): a binary
    LightGBM classifier of 500 trees of up to 31 leaves on 20 features."""
    import lightgbm
    import onnxmltools
    x, y = classification(n=5000, classes=2, features=20)
    m = lightgbm.LGBMClassifier(n_estimators=500, num_leaves=31, random_state=SEED, verbose=-1, n_jobs=1).fit(x, y)
    return (onnxmltools.convert_lightgbm(m, initial_types=lgbm_input(20), zipmap=False, target_opset=15),
            {"input": ref_rows(features=20)})


def xgboost_classifier(small):
    import onnxmltools
    import xgboost
    x, y = classification()
    m = xgboost.XGBClassifier(n_estimators=5 if small else 100, max_depth=3 if small else 6, random_state=SEED, n_jobs=1).fit(x, y)
    return onnxmltools.convert_xgboost(m, initial_types=lgbm_input(), target_opset=15), {"input": ref_rows()}


def tree_ensemble_v5(small):
    """TreeEnsemble (ai.onnx.ml 5): a random forest regressor rewritten by
    onnx's own version converter from TreeEnsembleRegressor (opset 3)."""
    from sklearn.ensemble import RandomForestRegressor
    x, y = regression()
    m = RandomForestRegressor(n_estimators=3 if small else 30, max_depth=4 if small else 8, random_state=SEED).fit(x, y)
    return to_v5(skl(m, x)), {"X": ref_rows()}


def to_v5(model):
    """model with its TreeEnsembleRegressor nodes rewritten as TreeEnsemble
    (ai.onnx.ml 5) nodes: interior nodes numbered 0..I-1 per the v5
    layout, leaves 0..L-1 with one (target, weight) each."""
    import onnx
    from onnx import helper, numpy_helper
    g = model.graph
    for k, n in enumerate(g.node):
        if n.op_type != "TreeEnsembleRegressor":
            continue
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        nodes = list(zip(a["nodes_treeids"], a["nodes_nodeids"]))
        modes = [m.decode() for m in a["nodes_modes"]]
        interior = {key: i for i, key in enumerate(k2 for k2, m in zip(nodes, modes) if m != "LEAF")}
        leaves = {key: i for i, key in enumerate(k2 for k2, m in zip(nodes, modes) if m == "LEAF")}
        weights = {}
        for t, nd, tid, w in zip(a["target_treeids"], a["target_nodeids"], a["target_ids"], a["target_weights"]):
            weights[(t, nd)] = (tid, w)
        code = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5}
        feats, splits, ms, tids, fids, tl, fl = [], [], [], [], [], [], []
        for i, (key, mode) in enumerate(zip(nodes, modes)):
            if mode == "LEAF":
                continue
            feats.append(a["nodes_featureids"][i])
            splits.append(a["nodes_values"][i])
            ms.append(code[mode])
            for ids, out, leaf in ((a["nodes_truenodeids"], tids, tl), (a["nodes_falsenodeids"], fids, fl)):
                child = (key[0], ids[i])
                if child in leaves:
                    out.append(leaves[child])
                    leaf.append(1)
                else:
                    out.append(interior[child])
                    leaf.append(0)
        roots = []
        for t in sorted(set(a["nodes_treeids"])):
            roots.append(interior[(t, 0)])
        lt = [weights[key][0] for key in leaves]
        lw = [weights[key][1] for key in leaves]
        new = helper.make_node(
            "TreeEnsemble", list(n.input), list(n.output), domain="ai.onnx.ml", name=n.name,
            n_targets=a.get("n_targets", 1), aggregate_function={"SUM": 1, "AVERAGE": 0}[a.get("aggregate_function", b"SUM").decode()],
            nodes_featureids=feats, nodes_splits=numpy_helper.from_array(np.array(splits, np.float32)),
            nodes_modes=numpy_helper.from_array(np.array(ms, np.uint8)), nodes_truenodeids=tids, nodes_falsenodeids=fids,
            nodes_trueleafs=tl, nodes_falseleafs=fl, leaf_targetids=lt,
            leaf_weights=numpy_helper.from_array(np.array(lw, np.float32)), tree_roots=roots)
        g.node.remove(n)
        g.node.insert(k, new)
    for o in model.opset_import:
        if o.domain == "ai.onnx.ml":
            o.version = 5
    onnx.checker.check_model(model)
    return model


SKL = "scikit-learn 1.9.1 via skl2onnx 1.20.0"
LGB = "LightGBM 4.7.0 via onnxmltools 1.16.0"
XGB = "XGBoost 3.2.0 via onnxmltools 1.16.0"
MODELS = {
    "sklearn_scaler_logreg": ("onnx-skl2onnx", SKL + ": StandardScaler + LogisticRegression", scaler_logreg),
    "sklearn_random_forest": ("onnx-skl2onnx", SKL + ": RandomForestClassifier", random_forest),
    "sklearn_gradient_boosting_regressor": ("onnx-skl2onnx", SKL + ": GradientBoostingRegressor", gradient_boosting_regressor),
    "sklearn_svc_probability": ("onnx-skl2onnx", SKL + ": SVC(probability=True)", svc_probability),
    "sklearn_svr": ("onnx-skl2onnx", SKL + ": SVR", svr),
    "sklearn_onehot_columns": ("onnx-skl2onnx", SKL + ": ColumnTransformer(OneHotEncoder, StandardScaler) + LogisticRegression, ZipMap", onehot_columns),
    "sklearn_zipmap_classifier": ("onnx-skl2onnx", SKL + ": DecisionTreeClassifier, string labels, ZipMap", zipmap_classifier),
    "sklearn_preprocess_linear": ("onnx-skl2onnx", SKL + ": SimpleImputer + MinMaxScaler + Normalizer + LinearRegression", preprocess_linear),
    "sklearn_binarizer_logreg": ("onnx-skl2onnx", SKL + ": SimpleImputer + Binarizer + binary LogisticRegression", binarizer_logreg),
    "sklearn_hist_gradient_boosting": ("onnx-skl2onnx", SKL + ": HistGradientBoostingClassifier with NaNs", hist_gradient_boosting),
    "sklearn_tree_ensemble_v5": ("onnx-skl2onnx", SKL + ": RandomForestRegressor as TreeEnsemble (ai.onnx.ml 5)", tree_ensemble_v5),
    "lightgbm_classifier": ("onnx-onnxmltools", LGB + ": LGBMClassifier, 3 classes", lightgbm_classifier),
    "lightgbm_binary": ("onnx-onnxmltools", LGB + ": LGBMClassifier, 2 classes", lightgbm_binary),
    "lightgbm_regressor": ("onnx-onnxmltools", LGB + ": LGBMRegressor", lightgbm_regressor),
    "lightgbm_500": ("onnx-onnxmltools", LGB + ": LGBMClassifier, 500 trees (the benchmark's)", lightgbm_500),
    "xgboost_classifier": ("onnx-onnxmltools", XGB + ": XGBClassifier, 3 classes", xgboost_classifier),
}
# Outputs that must equal ONNX Runtime's bit for bit: tree sums without a
# post transform (added in ONNX Runtime's order). Labels (integers and
# strings) are always compared exactly; other floats within 1e-5.
EXACT = {
    "sklearn_random_forest": ["probabilities"],
    "sklearn_gradient_boosting_regressor": ["variable"],
    "sklearn_zipmap_classifier": ["output_probability"],
    "sklearn_tree_ensemble_v5": ["variable"],
    "lightgbm_regressor": ["variable"],
}
TOLERANCE = 1e-5
# The set `go test` runs (testdata/mlmodels, made by make ml-fixtures).
SMALL = ["sklearn_scaler_logreg", "sklearn_random_forest", "sklearn_onehot_columns", "sklearn_zipmap_classifier",
         "sklearn_svc_probability", "lightgbm_classifier", "lightgbm_binary", "xgboost_classifier", "sklearn_tree_ensemble_v5"]


def zipmap_keys(model):
    """The class labels of each ZipMap node's output, by output name."""
    from onnx import helper
    keys = {}
    for n in model.graph.node:
        if n.op_type == "ZipMap":
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            labels = a.get("classlabels_strings") or a.get("classlabels_int64s")
            keys[n.output[0]] = [k.decode() if isinstance(k, bytes) else k for k in labels]
    return keys


def as_array(name, value, keys):
    """ONNX Runtime's output as an array: strings as '<U', a ZipMap's list
    of maps as the [N, C] matrix of its tensor form."""
    if name in keys:
        return np.array([[row[k] for k in keys[name]] for row in value], dtype=np.float32)
    a = np.asarray(value)
    if a.dtype == object:
        a = a.astype(str)
    return a


def ort_outputs(model, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    keys = zipmap_keys(model)
    names = [o.name for o in sess.get_outputs()]
    return [(n, as_array(n, v, keys)) for n, v in zip(names, sess.run(None, feeds))]


def make_case(cases, name, fmt, source, build, small):
    d = os.path.join(cases, f"{name}.{fmt}")
    if os.path.exists(os.path.join(d, "case.json")):
        return
    os.makedirs(d, exist_ok=True)
    t0 = time.time()
    info = {"model": name, "source": source, "format": fmt, "reference_by": "onnxruntime 1.23.2 (1 thread)",
            "exact": EXACT.get(name, []), "atol": TOLERANCE, "rtol": TOLERANCE}
    try:
        model, feeds = build(small)
        info["train_seconds"] = round(time.time() - t0, 2)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
        info["opsets"] = {o.domain or "ai.onnx": o.version for o in model.opset_import}
        info["zipmap"] = zipmap_keys(model)
        save_case(d, list(feeds.items()), ort_outputs(model, feeds), info)
        print(f"{name}: {info['train_seconds']}s", flush=True)
    except Exception as e:  # recorded in the case
        info["export_error"] = short(e)
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(info, f, indent=1)
        print(f"{name}: FAILED {short(e, 300)}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".cache/realmodels")
    ap.add_argument("--only", default="")
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    only = {m for m in args.only.split(",") if m}
    cases = args.out if args.small else os.path.join(args.out, "cases")
    for name, (fmt, source, build) in MODELS.items():
        if only and name not in only:
            continue
        if args.small and name not in SMALL:
            continue
        make_case(cases, name, fmt, source, build, args.small)


if __name__ == "__main__":
    main()
