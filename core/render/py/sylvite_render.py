# sylvite_render: the Python side of the sylvite-render worker (core/render/render.hpp,
# docs/architecture.md "Rendering"). Salt 3008.5's renderer pipeline -- salt/template.py
# compile_template, the jinja/yaml/json/gpg renderers, salt/utils/templates.py
# render_jinja_tmpl, salt/utils/jinja.py (SaltCacheLoader, SerializerExtension, filters),
# salt/utils/yamlloader.py -- on Jinja2 and PyYAML from Debian, without importing Salt.
# Sections marked "salt/<file>: <name>" are Salt's own code (Apache-2.0, SaltStack),
# copied unchanged except that salt.utils.<mod>.<fn> references name the copies here.
# Protocol: framed JSON (4-byte big-endian length) on fd 0 / fd 1, one request at a time;
# logs on stderr. Thread-safety: single-threaded (one render at a time per process).
# pylint: skip-file
import base64
import binascii
import codecs
import collections
import copy
import datetime
import fnmatch
import hashlib
import hmac
import io
import ipaddress
import itertools
import json
import logging
import os
import pathlib
import posixpath
import pprint
import random
import re
import shlex
import string
import struct
import subprocess
import sys
import time
import traceback
import types
import unicodedata
import difflib
import errno
import functools
import socket
from string import ascii_letters, digits
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, MutableMapping, Sequence
from functools import wraps
from xml.dom import minidom
from xml.etree.ElementTree import Element, SubElement, tostring

if "/usr/lib/python3/dist-packages" not in sys.path:
    sys.path.append("/usr/lib/python3/dist-packages")

import jinja2  # noqa: E402
import jinja2.ext  # noqa: E402
import jinja2.sandbox  # noqa: E402
import yaml  # noqa: E402
from jinja2 import BaseLoader, TemplateNotFound, nodes  # noqa: E402
from jinja2.environment import TemplateModule  # noqa: E402
from jinja2.exceptions import TemplateRuntimeError  # noqa: E402
from jinja2.ext import Extension  # noqa: E402
from markupsafe import Markup  # noqa: E402
from yaml.constructor import ConstructorError  # noqa: E402
from yaml.nodes import MappingNode, SequenceNode  # noqa: E402
from yaml.parser import ParserError  # noqa: E402
from yaml.scanner import ScannerError  # noqa: E402

# Salt's extra log levels (salt/_logging): log.profile / log.trace / log.garbage.
for _lvl, _name in ((15, "PROFILE"), (5, "TRACE"), (1, "GARBAGE")):
    logging.addLevelName(_lvl, _name)
    setattr(logging, _name, _lvl)
    setattr(logging.Logger, _name.lower(),
            (lambda lvl: lambda self, msg, *a, **k: self.log(lvl, msg, *a, **k))(_lvl))
log = logging.getLogger("sylvite-render")
try:
    import jmespath  # Debian python3-jmespath: the json_query filter
except ImportError:
    jmespath = None
try:
    import timelib  # never in Debian; Salt's venv lacks it too
    HAS_TIMELIB = True
except ImportError:
    HAS_TIMELIB = False
ALGORITHMS_ATTR_NAME = "algorithms_guaranteed"  # salt/utils/data.py
GLOBAL_UUID = uuid.UUID("91633EBF-1C86-5E33-935A-28061F4B480E")  # salt/utils/jinja.py
DEFAULT_TARGET_DELIM = ":"
SLS_ENCODING = "utf-8"
__salt_system_encoding__ = "utf-8"


# --- registries (salt/utils/decorators/jinja.py)
class JinjaFilter:
    salt_jinja_filters = {}

    def __init__(self, name=None):
        self.name = name

    def __call__(self, function):
        name = self.name or function.__name__
        if name not in self.salt_jinja_filters:
            self.salt_jinja_filters[name] = function
        return function


class JinjaTest:
    salt_jinja_tests = {}

    def __init__(self, name=None):
        self.name = name

    def __call__(self, function):
        name = self.name or function.__name__
        if name not in self.salt_jinja_tests:
            self.salt_jinja_tests[name] = function
        return function


class JinjaGlobal:
    salt_jinja_globals = {}

    def __init__(self, name=None):
        self.name = name

    def __call__(self, function):
        name = self.name or function.__name__
        if name not in self.salt_jinja_globals:
            self.salt_jinja_globals[name] = function
        return function


jinja_filter = JinjaFilter
jinja_test = JinjaTest
jinja_global = JinjaGlobal


# --- exceptions (salt/exceptions.py): same names, same str()
class SaltException(Exception):
    def __init__(self, message=""):
        if not isinstance(message, str):
            message = str(message)
        super().__init__(message)
        self.strerror = message


class TemplateError(SaltException):
    pass


class SaltInvocationError(SaltException, TypeError):
    pass


class CommandExecutionError(SaltException):
    pass


class SaltRenderError(SaltException):
    def __init__(self, message, line_num=None, buf="", marker="    <======================", trace=None):
        self.error = message
        exc_str = message if isinstance(message, str) else str(message)
        self.line_num = line_num
        self.buffer = buf
        self.context = ""
        if trace:
            exc_str += f"\n{trace}\n"
        if self.line_num and self.buffer:
            self.context = get_context(self.buffer, self.line_num, marker=marker)
            exc_str += "; line {}\n\n{}".format(self.line_num, self.context)
        super().__init__(exc_str)


class ListProxy(list):  # salt.utils.optsdict.ListProxy: never produced here
    pass


def is_windows():
    return False


# --- salt/utils/args.py: yamlify_arg (comments trimmed)
def yamlify_arg(arg):
    if not isinstance(arg, str):
        return arg
    if arg.strip() in ("", "---", "..."):
        return arg
    elif "_" in arg and all([x in "0123456789_" for x in arg.strip()]):
        return arg
    else:
        if any(np_char in arg for np_char in ("\t", "\r", "\n")):
            return arg
    try:
        original_arg = arg
        if "#" in arg:
            parsed_arg = safe_load(arg)
            if isinstance(parsed_arg, str) or parsed_arg is None:
                return arg
            return parsed_arg
        if arg == "None":
            arg = None
        else:
            arg = safe_load(arg)
        if isinstance(arg, dict):
            if isinstance(original_arg, str) and not original_arg.startswith("{"):
                return original_arg
            else:
                return arg
        elif isinstance(arg, list):
            if isinstance(original_arg, str) and not original_arg.startswith("["):
                return original_arg
            else:
                return arg
        elif arg is None or isinstance(arg, (list, float, int, str)):
            if arg == "" and original_arg in ("|", "!"):
                return original_arg
            elif arg is None and original_arg.strip().startswith("#"):
                return original_arg
            elif arg is None and original_arg == "!":
                return original_arg
            else:
                return arg
        else:
            return original_arg
    except Exception:  # pylint: disable=broad-except
        return original_arg


# --- salt/utils/json.py
def dumps(obj, **kwargs):
    if "ensure_ascii" not in kwargs:
        kwargs["ensure_ascii"] = False
    return json.dumps(obj, **kwargs)


def loads(s, **kwargs):
    return json.loads(s, **kwargs)


# --- salt/utils/yamlloader.py: SaltYamlSafeLoader (unchanged)
BaseYamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SaltYamlSafeLoader(BaseYamlLoader):
    def __init__(self, stream, dictclass=dict):
        super().__init__(stream)
        if dictclass is not dict:
            self.add_constructor("tag:yaml.org,2002:map", type(self).construct_yaml_map)
            self.add_constructor("tag:yaml.org,2002:omap", type(self).construct_yaml_map)
        self.add_constructor("tag:yaml.org,2002:str", type(self).construct_yaml_str)
        self.add_constructor("tag:yaml.org,2002:python/unicode", type(self).construct_unicode)
        self.add_constructor("tag:yaml.org,2002:timestamp", type(self).construct_scalar)
        self.add_constructor("tag:yaml.org,2002:binary", type(self).construct_yaml_binary)
        self.dictclass = dictclass

    def construct_yaml_map(self, node):
        data = self.dictclass()
        yield data
        value = self.construct_mapping(node)
        data.update(value)

    def construct_unicode(self, node):
        return node.value

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, MappingNode):
            raise ConstructorError(None, None, f"expected a mapping node, but found {node.id}", node.start_mark)
        self.flatten_mapping(node)
        context = "while constructing a mapping"
        mapping = self.dictclass()
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise ConstructorError(context, node.start_mark, f"found unacceptable key {key_node.value}", key_node.start_mark)
            value = self.construct_object(value_node, deep=deep)
            if key in mapping:
                raise ConstructorError(context, node.start_mark, f"found conflicting ID '{key}'", key_node.start_mark)
            mapping[key] = value
        return mapping

    def construct_scalar(self, node):
        if node.tag == "tag:yaml.org,2002:int":
            if node.value == "0":
                pass
            elif node.value.startswith("0") and not node.value.startswith(("0b", "0x")):
                node.value = node.value.lstrip("0")
                if node.value == "":
                    node.value = "0"
        return super().construct_scalar(node)

    def construct_yaml_str(self, node):
        value = self.construct_scalar(node)
        return to_unicode(value)

    def construct_yaml_binary(self, node):
        try:
            value = self.construct_scalar(node).encode("ascii")
        except UnicodeEncodeError as exc:
            raise ConstructorError(None, None, f"failed to convert base64 data into ascii: {exc}", node.start_mark)
        try:
            missing = len(value) % 4
            if missing:
                value += b"=" * (4 - missing)
            return base64.decodebytes(value)
        except binascii.Error as exc:
            raise ConstructorError(None, None, f"failed to decode base64 data: {exc}", node.start_mark)

    def flatten_mapping(self, node):
        merge = []
        index = 0
        while index < len(node.value):
            key_node, value_node = node.value[index]
            if key_node.tag == "tag:yaml.org,2002:merge":
                del node.value[index]
                if isinstance(value_node, MappingNode):
                    self.flatten_mapping(value_node)
                    merge.extend(value_node.value)
                elif isinstance(value_node, SequenceNode):
                    submerge = []
                    for subnode in value_node.value:
                        if not isinstance(subnode, MappingNode):
                            raise ConstructorError(
                                "while constructing a mapping", node.start_mark,
                                "expected a mapping for merging, but found {}".format(subnode.id), subnode.start_mark)
                        self.flatten_mapping(subnode)
                        submerge.append(subnode.value)
                    submerge.reverse()
                    for value in submerge:
                        merge.extend(value)
                else:
                    raise ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        "expected a mapping or list of mappings for merging, but found {}".format(value_node.id),
                        value_node.start_mark)
            elif key_node.tag == "tag:yaml.org,2002:value":
                key_node.tag = "tag:yaml.org,2002:str"
                index += 1
            else:
                index += 1
        if merge:
            existing_nodes = [name_node.value for name_node, value_node in node.value]
            mergeable_items = [x for x in merge if x[0].value not in existing_nodes]
            node.value = mergeable_items + node.value


def safe_load(stream, Loader=SaltYamlSafeLoader):
    return yaml.load(stream, Loader=Loader)


YAMLError = yaml.YAMLError

# --- salt/utils/yamldumper.py: SafeOrderedDumper, safe_dump
try:
    from yaml import CSafeDumper as _SafeDumper
except ImportError:
    from yaml import SafeDumper as _SafeDumper


class SafeOrderedDumper(_SafeDumper):
    pass


def _represent_ordereddict(dumper, data):
    return dumper.represent_dict(list(data.items()))


def _represent_undefined(dumper, data):
    return dumper.represent_scalar("tag:yaml.org,2002:null", "NULL")


SafeOrderedDumper.add_representer(OrderedDict, _represent_ordereddict)
SafeOrderedDumper.add_representer(None, _represent_undefined)
SafeOrderedDumper.add_representer(collections.defaultdict, yaml.representer.SafeRepresenter.represent_dict)
SafeOrderedDumper.add_representer("tag:yaml.org,2002:timestamp", SafeOrderedDumper.represent_scalar)


def safe_dump(data, stream=None, **kwargs):
    if "allow_unicode" not in kwargs:
        kwargs["allow_unicode"] = True
    kwargs.setdefault("default_flow_style", None)
    return yaml.dump(data, stream, Dumper=SafeOrderedDumper, **kwargs)

# --- salt/utils/data.py: CaseInsensitiveDict
class CaseInsensitiveDict(MutableMapping):

    def __init__(self, init=None, **kwargs):
        """
        Force internal dict to be ordered to ensure a consistent iteration
        order, irrespective of case.
        """
        self._data = OrderedDict()
        self.update(init or {}, **kwargs)

    def __len__(self):
        return len(self._data)

    def __setitem__(self, key, value):
        # Store the case-sensitive key so it is available for dict iteration
        self._data[to_lowercase(key)] = (key, value)

    def __delitem__(self, key):
        del self._data[to_lowercase(key)]

    def __getitem__(self, key):
        return self._data[to_lowercase(key)][1]

    def __iter__(self):
        return (item[0] for item in self._data.values())

    def __eq__(self, rval):
        if not isinstance(rval, Mapping):
            # Comparing to non-mapping type (e.g. int) is always False
            return False
        return dict(self.items_lower()) == dict(CaseInsensitiveDict(rval).items_lower())

    def __repr__(self):
        return repr(dict(self.items()))

    def items_lower(self):
        """
        Returns a generator iterating over keys and values, with the keys all
        being lowercase.
        """
        return ((key, val[1]) for key, val in self._data.items())

    def copy(self):
        """
        Returns a copy of the object
        """
        return CaseInsensitiveDict(self._data.items())


# --- salt/utils/data.py: __change_case
def __change_case(data, attr, preserve_dict_class=False):
    try:
        return getattr(data, attr)()
    except AttributeError:
        pass

    data_type = data.__class__

    if isinstance(data, Mapping):
        return (data_type if preserve_dict_class else dict)(
            (
                __change_case(key, attr, preserve_dict_class),
                __change_case(val, attr, preserve_dict_class),
            )
            for key, val in data.items()
        )
    if isinstance(data, Sequence):
        return data_type(
            __change_case(item, attr, preserve_dict_class) for item in data
        )
    return data


# --- salt/utils/data.py: to_lowercase
def to_lowercase(data, preserve_dict_class=False):
    return __change_case(data, "lower", preserve_dict_class)


# --- salt/utils/data.py: to_uppercase
def to_uppercase(data, preserve_dict_class=False):
    return __change_case(data, "upper", preserve_dict_class)


# --- salt/utils/data.py: compare_dicts
@jinja_filter("compare_dicts")
def compare_dicts(old=None, new=None):
    ret = {}
    for key in set(new or {}).union(old or {}):
        if key not in old:
            # New key
            ret[key] = {"old": "", "new": new[key]}
        elif key not in new:
            # Key removed
            ret[key] = {"new": "", "old": old[key]}
        elif new[key] != old[key]:
            # Key modified
            ret[key] = {"old": old[key], "new": new[key]}
    return ret


# --- salt/utils/data.py: compare_lists
@jinja_filter("compare_lists")
def compare_lists(old=None, new=None):
    ret = {}
    for item in new:
        if item not in old:
            ret.setdefault("new", []).append(item)
    for item in old:
        if item not in new:
            ret.setdefault("old", []).append(item)
    return ret


# --- salt/utils/data.py: _remove_circular_refs
def _remove_circular_refs(ob, _seen=None):
    if _seen is None:
        _seen = set()
    if id(ob) in _seen:
        # Here we caught a circular reference.
        # Alert user and cleanup to continue.
        log.exception(
            "Caught a circular reference in data structure below."
            "Cleaning and continuing execution.\n%r\n",
            ob,
        )
        return None
    _seen.add(id(ob))
    res = ob
    if isinstance(ob, dict):
        res = {
            _remove_circular_refs(k, _seen): _remove_circular_refs(v, _seen)
            for k, v in ob.items()
        }
    elif isinstance(ob, (list, tuple, set, frozenset)):
        # Handle ListProxy from OptsDict by converting to regular list
        # ListProxy.__init__ requires special arguments, so we can't use type(ob)()
        pass

        if isinstance(ob, ListProxy):
            # Convert ListProxy to regular list (like __deepcopy__ does)
            res = list(_remove_circular_refs(v, _seen) for v in ob)
        else:
            res = type(ob)(_remove_circular_refs(v, _seen) for v in ob)
    # remove id again; only *nested* references count
    _seen.remove(id(ob))
    return res


# --- salt/utils/data.py: decode
def decode(
    data,
    encoding=None,
    errors="strict",
    keep=False,
    normalize=False,
    preserve_dict_class=False,
    preserve_tuples=False,
    to_str=False,
):
    # Clean data object before decoding to avoid circular references
    data = _remove_circular_refs(data)

    _decode_func = (
        to_unicode
        if not to_str
        else to_str
    )
    if isinstance(data, Mapping):
        return decode_dict(
            data,
            encoding,
            errors,
            keep,
            normalize,
            preserve_dict_class,
            preserve_tuples,
            to_str,
        )
    if isinstance(data, list):
        return decode_list(
            data,
            encoding,
            errors,
            keep,
            normalize,
            preserve_dict_class,
            preserve_tuples,
            to_str,
        )
    if isinstance(data, tuple):
        return (
            decode_tuple(
                data, encoding, errors, keep, normalize, preserve_dict_class, to_str
            )
            if preserve_tuples
            else decode_list(
                data,
                encoding,
                errors,
                keep,
                normalize,
                preserve_dict_class,
                preserve_tuples,
                to_str,
            )
        )
    if isinstance(data, datetime.datetime):
        return data.isoformat()
    try:
        data = _decode_func(data, encoding, errors, normalize)
    except TypeError:
        # to_unicode raises a TypeError when input is not a
        # string/bytestring/bytearray. This is expected and simply means we
        # are going to leave the value as-is.
        pass
    except UnicodeDecodeError:
        if not keep:
            raise
    return data


# --- salt/utils/data.py: decode_dict
def decode_dict(
    data,
    encoding=None,
    errors="strict",
    keep=False,
    normalize=False,
    preserve_dict_class=False,
    preserve_tuples=False,
    to_str=False,
):
    # Clean data object before decoding to avoid circular references
    data = _remove_circular_refs(data)

    # Make sure we preserve OrderedDicts
    ret = data.__class__() if preserve_dict_class else {}
    for key, value in data.items():
        if isinstance(key, tuple):
            key = (
                decode_tuple(
                    key, encoding, errors, keep, normalize, preserve_dict_class, to_str
                )
                if preserve_tuples
                else decode_list(
                    key,
                    encoding,
                    errors,
                    keep,
                    normalize,
                    preserve_dict_class,
                    preserve_tuples,
                    to_str,
                )
            )
        else:
            try:
                key = decode(
                    key,
                    encoding,
                    errors,
                    keep,
                    normalize,
                    preserve_dict_class,
                    preserve_tuples,
                    to_str,
                )

            except TypeError:
                # to_unicode raises a TypeError when input is not a
                # string/bytestring/bytearray. This is expected and simply
                # means we are going to leave the value as-is.
                pass
            except UnicodeDecodeError:
                if not keep:
                    raise

        if isinstance(value, list):
            value = decode_list(
                value,
                encoding,
                errors,
                keep,
                normalize,
                preserve_dict_class,
                preserve_tuples,
                to_str,
            )
        elif isinstance(value, tuple):
            value = (
                decode_tuple(
                    value,
                    encoding,
                    errors,
                    keep,
                    normalize,
                    preserve_dict_class,
                    to_str,
                )
                if preserve_tuples
                else decode_list(
                    value,
                    encoding,
                    errors,
                    keep,
                    normalize,
                    preserve_dict_class,
                    preserve_tuples,
                    to_str,
                )
            )
        elif isinstance(value, Mapping):
            value = decode_dict(
                value,
                encoding,
                errors,
                keep,
                normalize,
                preserve_dict_class,
                preserve_tuples,
                to_str,
            )
        else:
            try:
                value = decode(
                    value,
                    encoding,
                    errors,
                    keep,
                    normalize,
                    preserve_dict_class,
                    preserve_tuples,
                    to_str,
                )
            except TypeError as e:
                # to_unicode raises a TypeError when input is not a
                # string/bytestring/bytearray. This is expected and simply
                # means we are going to leave the value as-is.
                pass
            except UnicodeDecodeError:
                if not keep:
                    raise

        ret[key] = value
    return ret


# --- salt/utils/data.py: decode_list
def decode_list(
    data,
    encoding=None,
    errors="strict",
    keep=False,
    normalize=False,
    preserve_dict_class=False,
    preserve_tuples=False,
    to_str=False,
):
    # Clean data object before decoding to avoid circular references
    data = _remove_circular_refs(data)

    ret = []
    for item in data:
        if isinstance(item, list):
            item = decode_list(
                item,
                encoding,
                errors,
                keep,
                normalize,
                preserve_dict_class,
                preserve_tuples,
                to_str,
            )
        elif isinstance(item, tuple):
            item = (
                decode_tuple(
                    item, encoding, errors, keep, normalize, preserve_dict_class, to_str
                )
                if preserve_tuples
                else decode_list(
                    item,
                    encoding,
                    errors,
                    keep,
                    normalize,
                    preserve_dict_class,
                    preserve_tuples,
                    to_str,
                )
            )
        elif isinstance(item, Mapping):
            item = decode_dict(
                item,
                encoding,
                errors,
                keep,
                normalize,
                preserve_dict_class,
                preserve_tuples,
                to_str,
            )
        else:
            try:
                item = decode(
                    item,
                    encoding,
                    errors,
                    keep,
                    normalize,
                    preserve_dict_class,
                    preserve_tuples,
                    to_str,
                )

            except TypeError:
                # to_unicode raises a TypeError when input is not a
                # string/bytestring/bytearray. This is expected and simply
                # means we are going to leave the value as-is.
                pass
            except UnicodeDecodeError:
                if not keep:
                    raise

        ret.append(item)
    return ret


# --- salt/utils/data.py: decode_tuple
def decode_tuple(
    data,
    encoding=None,
    errors="strict",
    keep=False,
    normalize=False,
    preserve_dict_class=False,
    to_str=False,
):
    return tuple(
        decode_list(
            data, encoding, errors, keep, normalize, preserve_dict_class, True, to_str
        )
    )


# --- salt/utils/data.py: encode
def encode(
    data,
    encoding=None,
    errors="strict",
    keep=False,
    preserve_dict_class=False,
    preserve_tuples=False,
):
    # Clean data object before encoding to avoid circular references
    data = _remove_circular_refs(data)

    if isinstance(data, Mapping):
        return encode_dict(
            data, encoding, errors, keep, preserve_dict_class, preserve_tuples
        )
    if isinstance(data, list):
        return encode_list(
            data, encoding, errors, keep, preserve_dict_class, preserve_tuples
        )
    if isinstance(data, tuple):
        return (
            encode_tuple(data, encoding, errors, keep, preserve_dict_class)
            if preserve_tuples
            else encode_list(
                data, encoding, errors, keep, preserve_dict_class, preserve_tuples
            )
        )
    try:
        return to_bytes(data, encoding, errors)
    except TypeError:
        # to_bytes raises a TypeError when input is not a
        # string/bytestring/bytearray. This is expected and simply
        # means we are going to leave the value as-is.
        pass
    except UnicodeEncodeError:
        if not keep:
            raise
    return data


# --- salt/utils/data.py: encode_dict
@jinja_filter("json_decode_dict")  # Remove this for Aluminium
@jinja_filter("json_encode_dict")
def encode_dict(
    data,
    encoding=None,
    errors="strict",
    keep=False,
    preserve_dict_class=False,
    preserve_tuples=False,
):
    # Clean data object before encoding to avoid circular references
    data = _remove_circular_refs(data)
    ret = data.__class__() if preserve_dict_class else {}
    for key, value in data.items():
        if isinstance(key, tuple):
            key = (
                encode_tuple(key, encoding, errors, keep, preserve_dict_class)
                if preserve_tuples
                else encode_list(
                    key, encoding, errors, keep, preserve_dict_class, preserve_tuples
                )
            )
        else:
            try:
                key = to_bytes(key, encoding, errors)
            except TypeError:
                # to_bytes raises a TypeError when input is not a
                # string/bytestring/bytearray. This is expected and simply
                # means we are going to leave the value as-is.
                pass
            except UnicodeEncodeError:
                if not keep:
                    raise

        if isinstance(value, list):
            value = encode_list(
                value, encoding, errors, keep, preserve_dict_class, preserve_tuples
            )
        elif isinstance(value, tuple):
            value = (
                encode_tuple(value, encoding, errors, keep, preserve_dict_class)
                if preserve_tuples
                else encode_list(
                    value, encoding, errors, keep, preserve_dict_class, preserve_tuples
                )
            )
        elif isinstance(value, Mapping):
            value = encode_dict(
                value, encoding, errors, keep, preserve_dict_class, preserve_tuples
            )
        else:
            try:
                value = to_bytes(value, encoding, errors)
            except TypeError:
                # to_bytes raises a TypeError when input is not a
                # string/bytestring/bytearray. This is expected and simply
                # means we are going to leave the value as-is.
                pass
            except UnicodeEncodeError:
                if not keep:
                    raise

        ret[key] = value
    return ret


# --- salt/utils/data.py: encode_list
@jinja_filter("json_decode_list")  # Remove this for Aluminium
@jinja_filter("json_encode_list")
def encode_list(
    data,
    encoding=None,
    errors="strict",
    keep=False,
    preserve_dict_class=False,
    preserve_tuples=False,
):
    # Clean data object before encoding to avoid circular references
    data = _remove_circular_refs(data)

    ret = []
    for item in data:
        if isinstance(item, list):
            item = encode_list(
                item, encoding, errors, keep, preserve_dict_class, preserve_tuples
            )
        elif isinstance(item, tuple):
            item = (
                encode_tuple(item, encoding, errors, keep, preserve_dict_class)
                if preserve_tuples
                else encode_list(
                    item, encoding, errors, keep, preserve_dict_class, preserve_tuples
                )
            )
        elif isinstance(item, Mapping):
            item = encode_dict(
                item, encoding, errors, keep, preserve_dict_class, preserve_tuples
            )
        else:
            try:
                item = to_bytes(item, encoding, errors)
            except TypeError:
                # to_bytes raises a TypeError when input is not a
                # string/bytestring/bytearray. This is expected and simply
                # means we are going to leave the value as-is.
                pass
            except UnicodeEncodeError:
                if not keep:
                    raise

        ret.append(item)
    return ret


# --- salt/utils/data.py: encode_tuple
def encode_tuple(
    data, encoding=None, errors="strict", keep=False, preserve_dict_class=False
):
    return tuple(encode_list(data, encoding, errors, keep, preserve_dict_class, True))


# --- salt/utils/data.py: exactly_n
@jinja_filter("exactly_n_true")
def exactly_n(iterable, amount=1):
    i = iter(iterable)
    return all(any(i) for j in range(amount)) and not any(i)


# --- salt/utils/data.py: exactly_one
@jinja_filter("exactly_one_true")
def exactly_one(iterable):
    return exactly_n(iterable)


# --- salt/utils/data.py: filter_by
def data_filter_by(lookup_dict, lookup, traverse, merge=None, default="default", base=None):
    ret = None
    # Default value would be an empty list if lookup not found
    val = traverse_dict_and_list(traverse, lookup, [])

    # Iterate over the list of values to match against patterns in the
    # lookup_dict keys
    for each in val if isinstance(val, list) else [val]:
        for key in lookup_dict:
            test_key = key if isinstance(key, str) else str(key)
            test_each = each if isinstance(each, str) else str(each)
            if fnmatch.fnmatchcase(test_each, test_key):
                ret = lookup_dict[key]
                break
        if ret is not None:
            break

    if ret is None:
        ret = lookup_dict.get(default, None)

    if base and base in lookup_dict:
        base_values = lookup_dict[base]
        if ret is None:
            ret = base_values

        elif isinstance(base_values, Mapping):
            if not isinstance(ret, Mapping):
                raise SaltException(
                    "filter_by default and look-up values must both be dictionaries."
                )
            ret = update(copy.deepcopy(base_values), ret)

    if merge:
        if not isinstance(merge, Mapping):
            raise SaltException("filter_by merge argument must be a dictionary.")

        if ret is None:
            ret = merge
        else:
            update(ret, copy.deepcopy(merge))

    return ret


# --- salt/utils/data.py: traverse_dict
def traverse_dict(data, key, default=None, delimiter=DEFAULT_TARGET_DELIM):
    ptr = data
    try:
        for each in key.split(delimiter):
            ptr = ptr[each]
    except (KeyError, IndexError, TypeError):
        # Encountered a non-indexable value in the middle of traversing
        return default
    return ptr


# --- salt/utils/data.py: traverse_dict_and_list
@jinja_filter("traverse")
def traverse_dict_and_list(data, key, default=None, delimiter=DEFAULT_TARGET_DELIM):
    ptr = data
    if isinstance(key, str):
        key = key.split(delimiter)

    if isinstance(key, int):
        key = [key]

    for each in key:
        if isinstance(ptr, list):
            try:
                idx = int(each)
            except ValueError:
                embed_match = False
                # Index was not numeric, lets look at any embedded dicts
                for embedded in (x for x in ptr if isinstance(x, dict)):
                    try:
                        ptr = embedded[each]
                        embed_match = True
                        break
                    except KeyError:
                        pass
                if not embed_match:
                    # No embedded dicts matched, return the default
                    return default
            else:
                embed_match = False
                # Index was numeric, lets look at any embedded dicts
                # using the converted version of each.
                for embedded in (x for x in ptr if isinstance(x, dict)):
                    try:
                        ptr = embedded[idx]
                        embed_match = True
                        break
                    except KeyError:
                        pass
                if not embed_match:
                    try:
                        ptr = ptr[idx]
                    except IndexError:
                        return default
        else:
            try:
                ptr = ptr[each]
            except KeyError:
                # Late import to avoid circular import
                pass

                # YAML-load the current key (catches integer/float dict keys)
                try:
                    loaded_key = yamlify_arg(each)
                except Exception:  # pylint: disable=broad-except
                    return default
                if loaded_key == each:
                    # After YAML-loading, the desired key is unchanged. This
                    # means that the KeyError caught above is a legitimate
                    # failure to match the desired key. Therefore, return the
                    # default.
                    return default
                else:
                    # YAML-loading the key changed its value, so re-check with
                    # the loaded key. This is how we can match a numeric key
                    # with a string-based expression.
                    try:
                        ptr = ptr[loaded_key]
                    except (KeyError, TypeError):
                        return default
            except TypeError:
                return default
    return ptr


# --- salt/utils/data.py: subdict_match
def subdict_match(
    data, expr, delimiter=DEFAULT_TARGET_DELIM, regex_match=False, exact_match=False
):

    def _match(target, pattern, regex_match=False, exact_match=False):
        # XXX: A lot of this logic is here because of supporting PY2 and PY3,
        # now that we only support PY3 we should probably re-visit what's going
        # on here.
        try:
            target = str(target).lower()
        except UnicodeDecodeError:
            target = to_unicode(target).lower()
        try:
            pattern = str(pattern).lower()
        except UnicodeDecodeError:
            pattern = to_unicode(pattern).lower()

        if regex_match:
            try:
                return re.match(pattern, target)
            except Exception:  # pylint: disable=broad-except
                log.error("Invalid regex '%s' in match", pattern)
                return False
        else:
            return (
                target == pattern if exact_match else fnmatch.fnmatch(target, pattern)
            )

    def _dict_match(target, pattern, regex_match=False, exact_match=False):
        ret = False
        wildcard = pattern.startswith("*:")
        if wildcard:
            pattern = pattern[2:]

        if pattern == "*":
            # We are just checking that the key exists
            ret = True
        if not ret and pattern in target:
            # We might want to search for a key
            ret = True
        if not ret and any(
            _match(key, pattern, regex_match=regex_match, exact_match=exact_match)
            for key in target
        ):
            # The pattern may be a regex/glob that matches one of the keys,
            # just like list members are matched below
            ret = True
        if not ret and subdict_match(
            target, pattern, regex_match=regex_match, exact_match=exact_match
        ):
            ret = True
        if not ret and wildcard:
            for key in target:
                if isinstance(target[key], dict):
                    if _dict_match(
                        target[key],
                        pattern,
                        regex_match=regex_match,
                        exact_match=exact_match,
                    ):
                        return True
                elif isinstance(target[key], list):
                    for item in target[key]:
                        if _match(
                            item,
                            pattern,
                            regex_match=regex_match,
                            exact_match=exact_match,
                        ):
                            return True
                elif _match(
                    target[key],
                    pattern,
                    regex_match=regex_match,
                    exact_match=exact_match,
                ):
                    return True
        return ret

    splits = expr.split(delimiter)
    num_splits = len(splits)
    if num_splits == 1:
        # Delimiter not present, this can't possibly be a match
        return False

    # If we have 4 splits, then we have three delimiters. Thus, the indexes we
    # want to use are 3, 2, and 1, in that order.
    for idx in range(num_splits - 1, 0, -1):
        key = delimiter.join(splits[:idx])
        if key == "*":
            # We are matching on everything under the top level, so we need to
            # treat the match as the entire data being passed in
            matchstr = expr
            match = data
        else:
            matchstr = delimiter.join(splits[idx:])
            match = traverse_dict_and_list(data, key, {}, delimiter=delimiter)
        log.debug(
            "Attempting to match '%s' in '%s' using delimiter '%s'",
            matchstr,
            key,
            delimiter,
        )
        if match == {}:
            continue
        if isinstance(match, dict):
            if _dict_match(
                match, matchstr, regex_match=regex_match, exact_match=exact_match
            ):
                return True
            continue
        if isinstance(match, (list, tuple)):
            # We are matching a single component to a single list member
            for member in match:
                if isinstance(member, dict):
                    if _dict_match(
                        member,
                        matchstr,
                        regex_match=regex_match,
                        exact_match=exact_match,
                    ):
                        return True
                if _match(
                    member, matchstr, regex_match=regex_match, exact_match=exact_match
                ):
                    return True
            continue
        if _match(match, matchstr, regex_match=regex_match, exact_match=exact_match):
            return True
    return False


# --- salt/utils/data.py: substr_in_list
@jinja_filter("substring_in_list")
def substr_in_list(string_to_search_for, list_to_search):
    return any(string_to_search_for in s for s in list_to_search)


# --- salt/utils/data.py: is_dictlist
def is_dictlist(data):
    if isinstance(data, list):
        for element in data:
            if isinstance(element, dict):
                if len(element) != 1:
                    return False
            else:
                return False
        return True
    return False


# --- salt/utils/data.py: repack_dictlist
def repack_dictlist(data, strict=False, recurse=False, key_cb=None, val_cb=None):
    if isinstance(data, str):
        try:
            data = safe_load(data)
        except ParserError as err:
            log.error(err)
            return {}

    if key_cb is None:

        def key_cb(x):
            return x

    if val_cb is None:

        def val_cb(x, y):
            return y

    valid_non_dict = ((str,), (int,), float)
    if isinstance(data, list):
        for element in data:
            if isinstance(element, valid_non_dict):
                continue
            if isinstance(element, dict):
                if len(element) != 1:
                    log.error(
                        "Invalid input for repack_dictlist: key/value pairs "
                        "must contain only one element (data passed: %s).",
                        element,
                    )
                    return {}
            else:
                log.error(
                    "Invalid input for repack_dictlist: element %s is "
                    "not a string/dict/numeric value",
                    element,
                )
                return {}
    else:
        log.error(
            "Invalid input for repack_dictlist, data passed is not a list (%s)", data
        )
        return {}

    ret = {}
    for element in data:
        if isinstance(element, valid_non_dict):
            ret[key_cb(element)] = None
        else:
            key = next(iter(element))
            val = element[key]
            if is_dictlist(val):
                if recurse:
                    ret[key_cb(key)] = repack_dictlist(val, recurse=recurse)
                elif strict:
                    log.error(
                        "Invalid input for repack_dictlist: nested dictlist "
                        "found, but recurse is set to False"
                    )
                    return {}
                else:
                    ret[key_cb(key)] = val_cb(key, val)
            else:
                ret[key_cb(key)] = val_cb(key, val)
    return ret


# --- salt/utils/data.py: is_list
@jinja_filter("is_list")
def is_list(value):
    return isinstance(value, list)


# --- salt/utils/data.py: is_iter
@jinja_filter("is_iter")
def is_iter(thing, ignore=(str,)):
    if ignore and isinstance(thing, ignore):
        return False
    try:
        iter(thing)
        return True
    except TypeError:
        return False


# --- salt/utils/data.py: sorted_ignorecase
@jinja_filter("sorted_ignorecase")
def sorted_ignorecase(to_sort):
    return sorted(to_sort, key=lambda x: x.lower())


# --- salt/utils/data.py: is_true
def is_true(value=None):
    # First, try int/float conversion
    try:
        value = int(value)
    except (ValueError, TypeError):
        pass
    try:
        value = float(value)
    except (ValueError, TypeError):
        pass

    # Now check for truthiness
    if isinstance(value, ((int,), float)):
        return value > 0
    if isinstance(value, str):
        return str(value).lower() == "true"
    return bool(value)


# --- salt/utils/data.py: mysql_to_dict
@jinja_filter("mysql_to_dict")
def mysql_to_dict(data, key):
    ret = {}
    headers = [""]
    for line in data:
        if not line:
            continue
        if line.startswith("+"):
            continue
        comps = line.split("|")
        for idx, comp in enumerate(comps):
            comps[idx] = comp.strip()
        if len(headers) > 1:
            index = len(headers) - 1
            row = {}
            for field in range(index):
                if field < 1:
                    continue
                row[headers[field]] = to_num(comps[field])
            ret[row[key]] = row
        else:
            headers = comps
    return ret


# --- salt/utils/data.py: simple_types_filter
def simple_types_filter(data):
    if data is None:
        return data

    simpletypes_keys = ((str,), str, (int,), float, bool)
    simpletypes_values = tuple(list(simpletypes_keys) + [list, tuple])

    if isinstance(data, (list, tuple)):
        simplearray = []
        for value in data:
            if value is not None:
                if isinstance(value, (dict, list)):
                    value = simple_types_filter(value)
                elif not isinstance(value, simpletypes_values):
                    value = repr(value)
            simplearray.append(value)
        return simplearray

    if isinstance(data, dict):
        simpledict = {}
        for key, value in data.items():
            if key is not None and not isinstance(key, simpletypes_keys):
                key = repr(key)
            if value is not None and isinstance(value, (dict, list, tuple)):
                value = simple_types_filter(value)
            elif value is not None and not isinstance(value, simpletypes_values):
                value = repr(value)
            simpledict[key] = value
        return simpledict

    return data


# --- salt/utils/data.py: stringify
def stringify(data):
    ret = []
    for item in data:
        if not isinstance(item, str):
            item = str(item)
        ret.append(item)
    return ret


# --- salt/utils/data.py: json_query
@jinja_filter("json_query")
def json_query(data, expr):
    if jmespath is None:
        err = "json_query requires jmespath module installed"
        log.error(err)
        raise RuntimeError(err)
    return jmespath.search(expr, data)


# --- salt/utils/data.py: _is_not_considered_falsey
def _is_not_considered_falsey(value, ignore_types=()):
    return isinstance(value, bool) or type(value) in ignore_types or value


# --- salt/utils/data.py: filter_falsey
def filter_falsey(data, recurse_depth=None, ignore_types=()):
    filter_element = (
        functools.partial(
            filter_falsey, recurse_depth=recurse_depth - 1, ignore_types=ignore_types
        )
        if recurse_depth
        else lambda x: x
    )

    if isinstance(data, dict):
        processed_elements = [
            (key, filter_element(value)) for key, value in data.items()
        ]
        return type(data)(
            [
                (key, value)
                for key, value in processed_elements
                if _is_not_considered_falsey(value, ignore_types=ignore_types)
            ]
        )
    if is_iter(data):
        processed_elements = (filter_element(value) for value in data)
        return type(data)(
            [
                value
                for value in processed_elements
                if _is_not_considered_falsey(value, ignore_types=ignore_types)
            ]
        )
    return data


# --- salt/utils/data.py: recursive_diff
def recursive_diff(
    old, new, ignore_keys=None, ignore_order=False, ignore_missing_keys=False
):
    ignore_keys = ignore_keys or []
    res = {}
    ret_old = copy.deepcopy(old)
    ret_new = copy.deepcopy(new)
    if (
        isinstance(old, OrderedDict)
        and isinstance(new, OrderedDict)
        and not ignore_order
    ):
        append_old, append_new = [], []
        if len(old) != len(new):
            min_length = min(len(old), len(new))
            # The list coercion is required for Py3
            append_old = list(old.keys())[min_length:]
            append_new = list(new.keys())[min_length:]
        # Compare ordered
        for key_old, key_new in zip(old, new):
            if key_old == key_new:
                if key_old in ignore_keys:
                    del ret_old[key_old]
                    del ret_new[key_new]
                else:
                    res = recursive_diff(
                        old[key_old],
                        new[key_new],
                        ignore_keys=ignore_keys,
                        ignore_order=ignore_order,
                        ignore_missing_keys=ignore_missing_keys,
                    )
                    if not res:  # Equal
                        del ret_old[key_old]
                        del ret_new[key_new]
                    else:
                        ret_old[key_old] = res["old"]
                        ret_new[key_new] = res["new"]
            else:
                if key_old in ignore_keys:
                    del ret_old[key_old]
                if key_new in ignore_keys:
                    del ret_new[key_new]
        # If the OrderedDicts were of inequal length, add the remaining key/values.
        for item in append_old:
            ret_old[item] = old[item]
        for item in append_new:
            ret_new[item] = new[item]
        ret = {"old": ret_old, "new": ret_new} if ret_old or ret_new else {}
    elif isinstance(old, Mapping) and isinstance(new, Mapping):
        # Compare unordered
        for key in set(list(old) + list(new)):
            if key in ignore_keys:
                ret_old.pop(key, None)
                ret_new.pop(key, None)
            elif ignore_missing_keys and key in old and key not in new:
                del ret_old[key]
            elif key in old and key in new:
                res = recursive_diff(
                    old[key],
                    new[key],
                    ignore_keys=ignore_keys,
                    ignore_order=ignore_order,
                    ignore_missing_keys=ignore_missing_keys,
                )
                if not res:  # Equal
                    del ret_old[key]
                    del ret_new[key]
                else:
                    ret_old[key] = res["old"]
                    ret_new[key] = res["new"]
        ret = {"old": ret_old, "new": ret_new} if ret_old or ret_new else {}
    elif isinstance(old, set) and isinstance(new, set):
        ret = {"old": old - new, "new": new - old} if old - new or new - old else {}
    elif is_iter(old) and is_iter(new):
        # Create a list so we can edit on an index-basis.
        list_old = list(ret_old)
        list_new = list(ret_new)
        if ignore_order:
            for item_old in old:
                for item_new in new:
                    res = recursive_diff(
                        item_old,
                        item_new,
                        ignore_keys=ignore_keys,
                        ignore_order=ignore_order,
                        ignore_missing_keys=ignore_missing_keys,
                    )
                    if not res:
                        list_old.remove(item_old)
                        list_new.remove(item_new)
                        continue
        else:
            remove_indices = []
            for index, (iter_old, iter_new) in enumerate(zip(old, new)):
                res = recursive_diff(
                    iter_old,
                    iter_new,
                    ignore_keys=ignore_keys,
                    ignore_order=ignore_order,
                    ignore_missing_keys=ignore_missing_keys,
                )
                if not res:  # Equal
                    remove_indices.append(index)
                else:
                    list_old[index] = res["old"]
                    list_new[index] = res["new"]
            for index in reversed(remove_indices):
                list_old.pop(index)
                list_new.pop(index)
        # Instantiate a new whatever-it-was using the list as iterable source.
        # This may not be the most optimized in way of speed and memory usage,
        # but it will work for all iterable types.
        ret = (
            {"old": type(old)(list_old), "new": type(new)(list_new)}
            if list_old or list_new
            else {}
        )
    else:
        ret = {} if old == new else {"old": ret_old, "new": ret_new}
    return ret


# --- salt/utils/data.py: get_value
def get_value(obj, path, default=None):
    res = [{"value": obj}]
    if path:
        key = path[: path.find(":")] if ":" in path else path
        next_path = path[path.find(":") + 1 :] if ":" in path else None

        if key.startswith("{") and key.endswith("}"):
            placeholder_name = key[1:-1]
            # There will be multiple values to get here
            items = []
            if obj is None:
                return res
            if isinstance(obj, dict):
                items = obj.items()
            elif isinstance(obj, list):
                items = enumerate(obj)

            def _append_placeholder(value_dict, key):
                value_dict[placeholder_name] = key
                return value_dict

            values = [
                [
                    _append_placeholder(item, key)
                    for item in get_value(val, next_path, default)
                ]
                for key, val in items
            ]

            # flatten the list
            values = [y for x in values for y in x]
            return values
        elif isinstance(obj, dict):
            if key not in obj.keys():
                return [{"value": default}]

            value = obj.get(key)
            if res is not None:
                res = get_value(value, next_path, default)
            else:
                res = [{"value": value}]
        else:
            return [{"value": default if obj is not None else obj}]
    return res


# --- salt/utils/data.py: flatten
@jinja_filter("flatten")
def flatten(data, levels=None, preserve_nulls=False, _ids=None):
    if _ids is None:
        _ids = set()
    if id(data) in _ids:
        raise RecursionError("Reference cycle detected. Check input list.")
    _ids.add(id(data))

    ret = []

    for element in data:
        if not preserve_nulls and element in (None, "None", "null"):
            # ignore null items
            continue
        elif is_iter(element):
            if levels is None:
                ret.extend(flatten(element, preserve_nulls=preserve_nulls, _ids=_ids))
            elif levels >= 1:
                # decrement as we go down the stack
                ret.extend(
                    flatten(
                        element,
                        levels=(int(levels) - 1),
                        preserve_nulls=preserve_nulls,
                        _ids=_ids,
                    )
                )
            else:
                ret.append(element)
        else:
            ret.append(element)

    return ret


# --- salt/utils/data.py: sample
@jinja_filter("random_sample")
def sample_(value, size, seed=None):
    if seed is None:
        ret = random.sample(value, size)
    else:
        ret = random.Random(hash(seed)).sample(value, size)
    return ret


# --- salt/utils/data.py: shuffle
@jinja_filter("random_shuffle")
def shuffle_(value, seed=None):
    return sample_(value, len(value), seed=seed)


# --- salt/utils/data.py: to_entries
@jinja_filter("to_entries")
def to_entries(data):
    if isinstance(data, dict):
        ret = [{"key": key, "value": value} for key, value in data.items()]
    elif isinstance(data, list):
        ret = [{"key": idx, "value": value} for idx, value in enumerate(data)]
    else:
        raise SaltException("Input data must be a dict or list")
    return ret


# --- salt/utils/data.py: from_entries
@jinja_filter("from_entries")
def from_entries(entries):
    ret = {}
    for entry in entries:
        entry = CaseInsensitiveDict(entry)
        for key in ("key", "name"):
            keyval = entry.get(key)
            if keyval:
                ret[keyval] = entry.get("value")
                break
    return ret


# --- salt/utils/stringutils.py: to_bytes
@jinja_filter("to_bytes")
def to_bytes(s, encoding=None, errors="strict"):
    if encoding is None:
        # Try utf-8 first, and fall back to detected encoding
        encoding = ("utf-8", __salt_system_encoding__)
    if not isinstance(encoding, (tuple, list)):
        encoding = (encoding,)

    if not encoding:
        raise ValueError("encoding cannot be empty")

    exc = None
    if isinstance(s, bytes):
        return s
    if isinstance(s, bytearray):
        return bytes(s)
    if isinstance(s, str):
        for enc in encoding:
            try:
                return s.encode(enc, errors)
            except UnicodeEncodeError as err:
                exc = err
                continue
        # The only way we get this far is if a UnicodeEncodeError was
        # raised, otherwise we would have already returned (or raised some
        # other exception).
        raise exc  # pylint: disable=raising-bad-type
    raise TypeError(f"expected str, bytes, or bytearray not {type(s)}")


# --- salt/utils/stringutils.py: to_str
def to_str(s, encoding=None, errors="strict", normalize=False):

    def _normalize(s):
        try:
            return unicodedata.normalize("NFC", s) if normalize else s
        except TypeError:
            return s

    if encoding is None:
        # Try utf-8 first, and fall back to detected encoding
        encoding = ("utf-8", __salt_system_encoding__)
    if not isinstance(encoding, (tuple, list)):
        encoding = (encoding,)

    if not encoding:
        raise ValueError("encoding cannot be empty")

    if isinstance(s, str):
        return _normalize(s)

    exc = None
    if isinstance(s, (bytes, bytearray)):
        for enc in encoding:
            try:
                return _normalize(s.decode(enc, errors))
            except UnicodeDecodeError as err:
                exc = err
                continue
        # The only way we get this far is if a UnicodeDecodeError was
        # raised, otherwise we would have already returned (or raised some
        # other exception).
        raise exc  # pylint: disable=raising-bad-type
    raise TypeError(f"expected str, bytes, or bytearray not {type(s)}")


# --- salt/utils/stringutils.py: to_unicode
def to_unicode(s, encoding=None, errors="strict", normalize=False):

    def _normalize(s):
        return unicodedata.normalize("NFC", s) if normalize else s

    if encoding is None:
        # Try utf-8 first, and fall back to detected encoding
        encoding = ("utf-8", __salt_system_encoding__)
    if not isinstance(encoding, (tuple, list)):
        encoding = (encoding,)

    if not encoding:
        raise ValueError("encoding cannot be empty")

    if isinstance(s, str):
        return _normalize(s)
    elif isinstance(s, (bytes, bytearray)):
        return _normalize(to_str(s, encoding, errors))
    raise TypeError(f"expected str, bytes, or bytearray not {type(s)}")


# --- salt/utils/stringutils.py: to_num
@jinja_filter("str_to_num")
@jinja_filter("to_num")
def to_num(text):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


# --- salt/utils/stringutils.py: to_none
def to_none(text):
    if str(text).strip():
        return text
    return None


# --- salt/utils/stringutils.py: is_hex
@jinja_filter("is_hex")
def is_hex(value):
    try:
        int(value, 16)
        return True
    except (TypeError, ValueError):
        return False


# --- salt/utils/stringutils.py: is_binary
def is_binary(data):

    if not data or not isinstance(data, ((str,), bytes)):
        return False

    if not isinstance(data, bytes):
        data = to_bytes(data)

    if b"\0" in data:
        return True

    def int2byte(x):
        return bytes((x,))

    # Defines the text characters as being the ASCII characters plus a few
    # control characters (newline, carriage return, tab, formfeed and backspace)
    text_characters = b"".join(int2byte(i) for i in range(32, 127)) + b"\n\r\t\f\b"

    try:
        # Defines the range of values used by UTF-8 multibyte characters
        mb_utf8_characters = b"".join(int2byte(i) for i in range(128, 255))

        data.decode(__salt_system_encoding__)

        text_characters = text_characters + mb_utf8_characters
    except UnicodeDecodeError as err:
        # This handles truncated characters at end of string
        if err.reason == "unexpected end of data":
            text_characters = text_characters + mb_utf8_characters

    nontext = data.translate(None, text_characters)

    # If more than 30% non-text characters, then
    # this is considered binary data
    return float(len(nontext)) / len(data) > 0.30


# --- salt/utils/stringutils.py: random
@jinja_filter("random_str")
def random_str_(size=32):
    key = os.urandom(size)
    return to_unicode(base64.b64encode(key).replace(b"\n", b"")[:size])


# --- salt/utils/stringutils.py: contains_whitespace
@jinja_filter("contains_whitespace")
def contains_whitespace(text):
    return any(x.isspace() for x in text)


# --- salt/utils/stringutils.py: human_to_bytes
@jinja_filter("human_to_bytes")
def human_to_bytes(size, default_unit="B", handle_metric=False):
    m = re.match(r"(?P<value>[0-9.]*)\s*(?P<unit>.*)$", str(size).strip())
    value = m.group("value")
    # default unit
    unit = m.group("unit").lower() or default_unit.lower()
    try:
        value = int(value)
    except ValueError:
        try:
            value = float(value)
        except ValueError:
            return 0
    # flag for base ten
    dec = False
    if re.match(r"[kmgtpezy]b$", unit):
        dec = True if handle_metric else False
    elif not re.match(r"(b|[kmgtpezy](ib)?)$", unit):
        return 0
    p = "bkmgtpezy".index(unit[0])
    value *= 10 ** (p * 3) if dec else 2 ** (p * 10)
    return int(value)


# --- salt/utils/stringutils.py: expr_match
def expr_match(line, expr):
    try:
        if fnmatch.fnmatch(line, expr):
            return True
        try:
            if re.match(rf"\A{expr}\Z", line):
                return True
        except re.error:
            pass
    except TypeError:
        log.exception("Value %r or expression %r is not a string", line, expr)
    return False


# --- salt/utils/stringutils.py: check_whitelist_blacklist
@jinja_filter("check_whitelist_blacklist")
def check_whitelist_blacklist(value, whitelist=None, blacklist=None):
    # Normalize the input so that we have a list
    if blacklist:
        if isinstance(blacklist, str):
            blacklist = [blacklist]
        if not hasattr(blacklist, "__iter__"):
            raise TypeError(
                "Expecting iterable blacklist, but got {} ({})".format(
                    type(blacklist).__name__, blacklist
                )
            )
    else:
        blacklist = []

    if whitelist:
        if isinstance(whitelist, str):
            whitelist = [whitelist]
        if not hasattr(whitelist, "__iter__"):
            raise TypeError(
                "Expecting iterable whitelist, but got {} ({})".format(
                    type(whitelist).__name__, whitelist
                )
            )
    else:
        whitelist = []

    _blacklist_match = any(expr_match(value, expr) for expr in blacklist)
    _whitelist_match = any(expr_match(value, expr) for expr in whitelist)

    if blacklist and not whitelist:
        # Blacklist but no whitelist
        return not _blacklist_match
    elif whitelist and not blacklist:
        # Whitelist but no blacklist
        return _whitelist_match
    elif blacklist and whitelist:
        # Both whitelist and blacklist
        return not _blacklist_match and _whitelist_match
    else:
        # No blacklist or whitelist passed
        return True


# --- salt/utils/stringutils.py: get_context
def get_context(template, line, num_lines=5, marker=None):
    template_lines = template.splitlines()
    num_template_lines = len(template_lines)

    # In test mode, a single line template would return a crazy line number like,
    # 357. Do this sanity check and if the given line is obviously wrong, just
    # return the entire template
    if line > num_template_lines:
        return template

    context_start = max(0, line - num_lines - 1)  # subt 1 for 0-based indexing
    context_end = min(num_template_lines, line + num_lines)
    error_line_in_context = line - context_start - 1  # subtr 1 for 0-based idx

    buf = []
    if context_start > 0:
        buf.append("[...]")
        error_line_in_context += 1

    buf.extend(template_lines[context_start:context_end])

    if context_end < num_template_lines:
        buf.append("[...]")

    if marker:
        buf[error_line_in_context] += marker

    return "---\n{}\n---".format("\n".join(buf))


# --- salt/utils/stringutils.py: camel_to_snake_case
@jinja_filter("to_snake_case")
def camel_to_snake_case(camel_input):
    res = camel_input[0].lower()
    for i, letter in enumerate(camel_input[1:], 1):
        if letter.isupper():
            if camel_input[i - 1].islower() or (
                i != len(camel_input) - 1 and camel_input[i + 1].islower()
            ):
                res += "_"
        res += letter.lower()
    return res


# --- salt/utils/stringutils.py: snake_to_camel_case
@jinja_filter("to_camelcase")
def snake_to_camel_case(snake_input, uppercamel=False):
    words = snake_input.split("_")
    if uppercamel:
        words[0] = words[0].capitalize()
    return words[0] + "".join(word.capitalize() for word in words[1:])


# --- salt/utils/hashutils.py: base64_b64encode
@jinja_filter("base64_encode")
def base64_b64encode(instr):
    return to_unicode(
        base64.b64encode(to_bytes(instr)),
        encoding="utf8" if is_windows() else None,
    )


# --- salt/utils/hashutils.py: base64_b64decode
@jinja_filter("base64_decode")
def base64_b64decode(instr):
    decoded = base64.b64decode(to_bytes(instr))
    try:
        return to_unicode(
            decoded, encoding="utf8" if is_windows() else None
        )
    except UnicodeDecodeError:
        return decoded


# --- salt/utils/hashutils.py: md5_digest
@jinja_filter("md5")
def md5_digest(instr):
    return to_unicode(
        hashlib.md5(to_bytes(instr)).hexdigest()
    )


# --- salt/utils/hashutils.py: sha1_digest
@jinja_filter("sha1")
def sha1_digest(instr):
    return hashlib.sha1(to_bytes(instr)).hexdigest()


# --- salt/utils/hashutils.py: sha256_digest
@jinja_filter("sha256")
def sha256_digest(instr):
    return to_unicode(
        hashlib.sha256(to_bytes(instr)).hexdigest()
    )


# --- salt/utils/hashutils.py: sha512_digest
@jinja_filter("sha512")
def sha512_digest(instr):
    return to_unicode(
        hashlib.sha512(to_bytes(instr)).hexdigest()
    )


# --- salt/utils/hashutils.py: hmac_signature
@jinja_filter("hmac")
def hmac_signature(string, shared_secret, challenge_hmac):
    msg = to_bytes(string)
    key = to_bytes(shared_secret)
    challenge = to_bytes(challenge_hmac)
    hmac_hash = hmac.new(key, msg, hashlib.sha256)
    valid_hmac = base64.b64encode(hmac_hash.digest())
    return valid_hmac == challenge


# --- salt/utils/hashutils.py: hmac_compute
@jinja_filter("hmac_compute")
def hmac_compute(string, shared_secret):
    msg = to_bytes(string)
    key = to_bytes(shared_secret)
    hmac_hash = hmac.new(key, msg, hashlib.sha256).hexdigest()
    return hmac_hash


# --- salt/utils/hashutils.py: random_hash
@jinja_filter("rand_str")
@jinja_filter("random_hash")
def random_hash(size=9999999999, hash_type=None):
    if not hash_type:
        hash_type = "md5"
    hasher = getattr(hashlib, hash_type)
    return hasher(
        to_bytes(str(random.SystemRandom().randint(0, size)))
    ).hexdigest()


# --- salt/utils/hashutils.py: get_hash
@jinja_filter("file_hashsum")
def get_hash(path, form="sha256", chunk_size=65536):
    hash_type = hasattr(hashlib, form) and getattr(hashlib, form) or None
    if hash_type is None:
        raise ValueError(f"Invalid hash type: {form}")

    with open(path, "rb") as ifile:
        hash_obj = hash_type()
        # read the file in in chunks, not the entire file
        for chunk in iter(lambda: ifile.read(chunk_size), b""):
            hash_obj.update(chunk)
        return hash_obj.hexdigest()


# --- salt/utils/dateutils.py: date_cast
def date_cast(date):
    if date is None:
        return datetime.datetime.now()
    elif isinstance(date, datetime.datetime):
        return date

    # fuzzy date
    try:
        if isinstance(date, str):
            try:
                if HAS_TIMELIB:
                    # py3: yes, timelib.strtodatetime wants bytes, not str :/
                    return timelib.strtodatetime(to_bytes(date))
            except ValueError:
                pass

            # not parsed yet, obviously a timestamp?
            if date.isdigit():
                date = int(date)
            else:
                date = float(date)

        return datetime.datetime.fromtimestamp(date)
    except Exception:  # pylint: disable=broad-except
        if HAS_TIMELIB:
            raise ValueError(f"Unable to parse {date}")

        raise RuntimeError(f"Unable to parse {date}. Consider installing timelib")


# --- salt/utils/dateutils.py: strftime
@jinja_filter("date_format")
@jinja_filter("strftime")
def strftime(date=None, format="%Y-%m-%d"):
    return date_cast(date).strftime(format)


# --- salt/utils/dictupdate.py: update
def update(dest, upd, recursive_update=True, merge_lists=False, strict=False):
    if (not isinstance(dest, Mapping)) or (not isinstance(upd, Mapping)):
        raise TypeError("Cannot update using non-dict types in dictupdate.update()")
    updkeys = list(upd.keys())
    if not set(list(dest.keys())) & set(updkeys):
        recursive_update = False
    if recursive_update:
        for key in updkeys:
            val = upd[key]
            try:
                dest_subkey = dest.get(key, None)
            except AttributeError:
                dest_subkey = None
            if isinstance(dest_subkey, Mapping) and isinstance(val, Mapping):
                ret = update(dest_subkey, val, merge_lists=merge_lists)
                dest[key] = ret
            elif isinstance(dest_subkey, list) and isinstance(val, list):
                if merge_lists:
                    merged = copy.deepcopy(dest_subkey)
                    merged.extend([x for x in val if x not in merged])
                    dest[key] = merged
                else:
                    dest[key] = upd[key]
            elif (
                strict
                and merge_lists
                and isinstance(dest_subkey, list)
                and isinstance(val, Mapping)
            ):
                raise TypeError(
                    f"With {merge_lists=} we cannot update list under {key=} with mapping containing keys {val.keys()=} in dictupdate.update()"
                )
            else:
                dest[key] = upd[key]
        return dest
    for k in upd:
        dest[k] = upd[k]
    return dest


# --- salt/utils/dictupdate.py: merge_list
def merge_list(obj_a, obj_b):
    ret = {}
    for key, val in obj_a.items():
        if key in obj_b:
            ret[key] = [val, obj_b[key]]
        else:
            ret[key] = val
    return ret


# --- salt/utils/dictupdate.py: merge_recurse
def merge_recurse(obj_a, obj_b, merge_lists=False):
    copied = copy.deepcopy(obj_a)
    return update(copied, obj_b, merge_lists=merge_lists)


# --- salt/utils/dictupdate.py: merge_aggregate
def merge_aggregate(obj_a, obj_b):
    _yamlex_merge_recursive = _merge_recursive_aggregate

    return _yamlex_merge_recursive(obj_a, obj_b, level=1)


# --- salt/utils/dictupdate.py: merge_overwrite
def merge_overwrite(obj_a, obj_b, merge_lists=False):
    for obj in obj_b:
        if obj in obj_a:
            obj_a[obj] = obj_b[obj]
    return merge_recurse(obj_a, obj_b, merge_lists=merge_lists)


# --- salt/utils/dictupdate.py: merge
def merge(obj_a, obj_b, strategy="smart", renderer="yaml", merge_lists=False):
    if strategy == "smart":
        if renderer.split("|")[-1] == "yamlex" or renderer.startswith("yamlex_"):
            strategy = "aggregate"
        else:
            strategy = "recurse"

    if strategy == "list":
        merged = merge_list(obj_a, obj_b)
    elif strategy == "recurse":
        merged = merge_recurse(obj_a, obj_b, merge_lists)
    elif strategy == "aggregate":
        #: level = 1 merge at least root data
        merged = merge_aggregate(obj_a, obj_b)
    elif strategy == "overwrite":
        merged = merge_overwrite(obj_a, obj_b, merge_lists)
    elif strategy == "none":
        # If we do not want to merge, there is only one pillar passed, so we can safely use the default recurse,
        # we just do not want to log an error
        merged = merge_recurse(obj_a, obj_b)
    else:
        log.warning("Unknown merging strategy '%s', fallback to recurse", strategy)
        merged = merge_recurse(obj_a, obj_b)

    return merged


# --- salt/utils/dictupdate.py: ensure_dict_key
def ensure_dict_key(in_dict, keys, delimiter=DEFAULT_TARGET_DELIM, ordered_dict=False):
    if delimiter in keys:
        a_keys = keys.split(delimiter)
    else:
        a_keys = [keys]
    dict_pointer = in_dict
    while a_keys:
        current_key = a_keys.pop(0)
        if current_key not in dict_pointer or not isinstance(
            dict_pointer[current_key], dict
        ):
            dict_pointer[current_key] = OrderedDict() if ordered_dict else {}
        dict_pointer = dict_pointer[current_key]
    return in_dict


# --- salt/utils/dictupdate.py: _dict_rpartition
def _dict_rpartition(in_dict, keys, delimiter=DEFAULT_TARGET_DELIM, ordered_dict=False):
    if delimiter in keys:
        all_but_last_keys, _, last_key = keys.rpartition(delimiter)
        ensure_dict_key(
            in_dict, all_but_last_keys, delimiter=delimiter, ordered_dict=ordered_dict
        )
        dict_pointer = traverse_dict(
            in_dict, all_but_last_keys, default=None, delimiter=delimiter
        )
    else:
        dict_pointer = in_dict
        last_key = keys
    return dict_pointer, last_key


# --- salt/utils/dictupdate.py: set_dict_key_value
@jinja_filter("set_dict_key_value")
def set_dict_key_value(
    in_dict, keys, value, delimiter=DEFAULT_TARGET_DELIM, ordered_dict=False
):
    dict_pointer, last_key = _dict_rpartition(
        in_dict, keys, delimiter=delimiter, ordered_dict=ordered_dict
    )
    dict_pointer[last_key] = value
    return in_dict


# --- salt/utils/dictupdate.py: update_dict_key_value
@jinja_filter("update_dict_key_value")
def update_dict_key_value(
    in_dict, keys, value, delimiter=DEFAULT_TARGET_DELIM, ordered_dict=False
):
    dict_pointer, last_key = _dict_rpartition(
        in_dict, keys, delimiter=delimiter, ordered_dict=ordered_dict
    )
    if last_key not in dict_pointer or dict_pointer[last_key] is None:
        dict_pointer[last_key] = OrderedDict() if ordered_dict else {}
    try:
        dict_pointer[last_key].update(value)
    except AttributeError:
        raise SaltInvocationError(
            "The last key contains a {}, which cannot update.".format(
                type(dict_pointer[last_key])
            )
        )
    except (ValueError, TypeError):
        raise SaltInvocationError(
            "Cannot update {} with a {}.".format(
                type(dict_pointer[last_key]), type(value)
            )
        )
    return in_dict


# --- salt/utils/dictupdate.py: append_dict_key_value
@jinja_filter("append_dict_key_value")
def append_dict_key_value(
    in_dict, keys, value, delimiter=DEFAULT_TARGET_DELIM, ordered_dict=False
):
    dict_pointer, last_key = _dict_rpartition(
        in_dict, keys, delimiter=delimiter, ordered_dict=ordered_dict
    )
    if last_key not in dict_pointer or dict_pointer[last_key] is None:
        dict_pointer[last_key] = []
    try:
        dict_pointer[last_key].append(value)
    except AttributeError:
        raise SaltInvocationError(
            "The last key contains a {}, which cannot append.".format(
                type(dict_pointer[last_key])
            )
        )
    return in_dict


# --- salt/utils/dictupdate.py: extend_dict_key_value
@jinja_filter("extend_dict_key_value")
def extend_dict_key_value(
    in_dict, keys, value, delimiter=DEFAULT_TARGET_DELIM, ordered_dict=False
):
    dict_pointer, last_key = _dict_rpartition(
        in_dict, keys, delimiter=delimiter, ordered_dict=ordered_dict
    )
    if last_key not in dict_pointer or dict_pointer[last_key] is None:
        dict_pointer[last_key] = []
    try:
        dict_pointer[last_key].extend(value)
    except AttributeError:
        raise SaltInvocationError(
            "The last key contains a {}, which cannot extend.".format(
                type(dict_pointer[last_key])
            )
        )
    except TypeError:
        raise SaltInvocationError(
            "Cannot extend {} with a {}.".format(
                type(dict_pointer[last_key]), type(value)
            )
        )
    return in_dict


# --- salt/utils/args.py: clean_kwargs
def clean_kwargs(**kwargs):
    """Drop the keys Salt's loader adds (those starting with "__")."""
    ret = {}
    for key, val in kwargs.items():
        if not key.startswith("__"):
            ret[key] = val
    return ret


def invalid_kwargs(invalid_kwargs, raise_exc=True):
    """salt/utils/args.py: raise SaltInvocationError naming the invalid keyword arguments."""
    if invalid_kwargs:
        if isinstance(invalid_kwargs, dict):
            new_invalid = [f"{x}={y}" for x, y in invalid_kwargs.items()]
            invalid_kwargs = new_invalid
    msg = "The following keyword arguments are not valid: {}".format(", ".join(invalid_kwargs))
    if raise_exc:
        raise SaltInvocationError(msg)
    return msg


# --- salt/utils/path.py: join
@jinja_filter("path_join")
def path_join_(*parts, **kwargs):
    parts = [to_str(part) for part in parts]

    kwargs = clean_kwargs(**kwargs)
    use_posixpath = kwargs.pop("use_posixpath", False)
    if kwargs:
        invalid_kwargs(kwargs)

    pathlib = posixpath if use_posixpath else os.path

    # Normalize path converting any os.sep as needed
    parts = [pathlib.normpath(p) for p in parts]

    try:
        root = parts.pop(0)
    except IndexError:
        # No args passed to func
        return ""

    root = to_unicode(root)
    if not parts:
        ret = root
    else:
        stripped = [p.lstrip(os.sep) for p in parts]
        ret = pathlib.join(root, *decode(stripped))
    return pathlib.normpath(ret)


# --- salt/utils/yamlencoding.py: yaml_dquote
@jinja_filter()
def yaml_dquote(text):
    with io.StringIO() as ostream:
        yemitter = yaml.emitter.Emitter(ostream, width=sys.maxsize)
        yemitter.write_double_quoted(str(text))
        return ostream.getvalue()


# --- salt/utils/yamlencoding.py: yaml_squote
@jinja_filter()
def yaml_squote(text):
    with io.StringIO() as ostream:
        yemitter = yaml.emitter.Emitter(ostream, width=sys.maxsize)
        yemitter.write_single_quoted(str(text))
        return ostream.getvalue()


# --- salt/utils/yamlencoding.py: yaml_encode
@jinja_filter()
def yaml_encode(data):
    yrepr = yaml.representer.SafeRepresenter()
    ynode = yrepr.represent_data(data)
    if not isinstance(ynode, yaml.ScalarNode):
        raise TypeError(
            "yaml_encode() only works with YAML scalar data; failed for {}".format(
                type(data)
            )
        )

    tag = ynode.tag.rsplit(":", 1)[-1]
    ret = ynode.value

    if tag == "str":
        ret = yaml_dquote(ynode.value)

    return ret


# --- salt/utils/network.py: is_ip
def is_ip(ip_addr):
    return is_ipv4(ip_addr) or is_ipv6(ip_addr)


# --- salt/utils/network.py: is_ipv4
def is_ipv4(ip_addr):
    try:
        return ipaddress.ip_address(ip_addr).version == 4
    except ValueError:
        return False


# --- salt/utils/network.py: is_ipv6
def is_ipv6(ip_addr):
    try:
        return ipaddress.ip_address(ip_addr).version == 6
    except ValueError:
        return False


# --- salt/utils/network.py: is_ip_filter
@jinja_filter("is_ip")
def is_ip_filter(ip_addr, options=None):
    return is_ipv4_filter(ip_addr, options=options) or is_ipv6_filter(
        ip_addr, options=options
    )


# --- salt/utils/network.py: _ip_options_global
def _ip_options_global(ip_obj, version):
    return not ip_obj.is_private


# --- salt/utils/network.py: _ip_options_multicast
def _ip_options_multicast(ip_obj, version):
    return ip_obj.is_multicast


# --- salt/utils/network.py: _ip_options_loopback
def _ip_options_loopback(ip_obj, version):
    return ip_obj.is_loopback


# --- salt/utils/network.py: _ip_options_link_local
def _ip_options_link_local(ip_obj, version):
    return ip_obj.is_link_local


# --- salt/utils/network.py: _ip_options_private
def _ip_options_private(ip_obj, version):
    return ip_obj.is_private


# --- salt/utils/network.py: _ip_options_reserved
def _ip_options_reserved(ip_obj, version):
    return ip_obj.is_reserved


# --- salt/utils/network.py: _ip_options_site_local
def _ip_options_site_local(ip_obj, version):
    if version == 6:
        return ip_obj.is_site_local
    return False


# --- salt/utils/network.py: _ip_options_unspecified
def _ip_options_unspecified(ip_obj, version):
    return ip_obj.is_unspecified


# --- salt/utils/network.py: _ip_options
def _ip_options(ip_obj, version, options=None):

    # will process and IP options
    options_fun_map = {
        "global": _ip_options_global,
        "link-local": _ip_options_link_local,
        "linklocal": _ip_options_link_local,
        "ll": _ip_options_link_local,
        "link_local": _ip_options_link_local,
        "loopback": _ip_options_loopback,
        "lo": _ip_options_loopback,
        "multicast": _ip_options_multicast,
        "private": _ip_options_private,
        "public": _ip_options_global,
        "reserved": _ip_options_reserved,
        "site-local": _ip_options_site_local,
        "sl": _ip_options_site_local,
        "site_local": _ip_options_site_local,
        "unspecified": _ip_options_unspecified,
    }

    if not options:
        return str(ip_obj)  # IP version already checked

    options_list = [option.strip() for option in options.split(",")]

    for option, fun in options_fun_map.items():
        if option in options_list:
            fun_res = fun(ip_obj, version)
            if not fun_res:
                return None
                # stop at first failed test
            # else continue
    return str(ip_obj)


# --- salt/utils/network.py: _is_ipv
def _is_ipv(ip_addr, version, options=None):

    if not version:
        version = 4

    if version not in (4, 6):
        return None

    try:
        ip_obj = ipaddress.ip_address(ip_addr)
    except ValueError:
        # maybe it is an IP network
        try:
            ip_obj = ipaddress.ip_interface(ip_addr)
        except ValueError:
            # nope, still not :(
            return None

    if not ip_obj.version == version:
        return None

    # has the right version, let's move on
    return _ip_options(ip_obj, version, options=options)


# --- salt/utils/network.py: is_ipv4_filter
@jinja_filter("is_ipv4")
def is_ipv4_filter(ip_addr, options=None):
    _is_ipv4 = _is_ipv(ip_addr, 4, options=options)
    return isinstance(_is_ipv4, str)


# --- salt/utils/network.py: is_ipv6_filter
@jinja_filter("is_ipv6")
def is_ipv6_filter(ip_addr, options=None):
    _is_ipv6 = _is_ipv(ip_addr, 6, options=options)
    return isinstance(_is_ipv6, str)


# --- salt/utils/network.py: _ipv_filter
def _ipv_filter(value, version, options=None):

    if version not in (4, 6):
        return

    if isinstance(value, (str, bytes)):
        return _is_ipv(
            value, version, options=options
        )  # calls is_ipv4 or is_ipv6 for `value`
    elif isinstance(value, (list, tuple, types.GeneratorType)):
        # calls is_ipv4 or is_ipv6 for each element in the list
        # os it filters and returns only those elements having the desired IP version
        return [
            _is_ipv(addr, version, options=options)
            for addr in value
            if _is_ipv(addr, version, options=options) is not None
        ]
    return None


# --- salt/utils/network.py: ipv4
@jinja_filter("ipv4")
def ipv4(value, options=None):
    return _ipv_filter(value, 4, options=options)


# --- salt/utils/network.py: ipv6
@jinja_filter("ipv6")
def ipv6(value, options=None):
    return _ipv_filter(value, 6, options=options)


# --- salt/utils/network.py: ipaddr
@jinja_filter("ipaddr")
def ipaddr(value, options=None):
    ipv4_obj = ipv4(value, options=options)
    ipv6_obj = ipv6(value, options=options)
    if ipv4_obj is None or ipv6_obj is None:
        # an IP address can be either IPv4 either IPv6
        # therefofe if the value passed as arg is not a list, at least one of the calls above will return None
        # if one of them is none, means that we should return only one of them
        return ipv4_obj or ipv6_obj  # one of them
    else:
        return ipv4_obj + ipv6_obj  # extend lists


# --- salt/utils/network.py: _filter_ipaddr
def _filter_ipaddr(value, options, version=None):
    ipaddr_filter_out = None
    if version:
        if version == 4:
            ipaddr_filter_out = ipv4(value, options)
        elif version == 6:
            ipaddr_filter_out = ipv6(value, options)
    else:
        ipaddr_filter_out = ipaddr(value, options)
    if not ipaddr_filter_out:
        return
    if not isinstance(ipaddr_filter_out, (list, tuple, types.GeneratorType)):
        ipaddr_filter_out = [ipaddr_filter_out]
    return ipaddr_filter_out


# --- salt/utils/network.py: ip_host
@jinja_filter("ip_host")
def ip_host(value, options=None, version=None):
    ipaddr_filter_out = _filter_ipaddr(value, options=options, version=version)
    if not ipaddr_filter_out:
        return
    if not isinstance(value, (list, tuple, types.GeneratorType)):
        return str(ipaddress.ip_interface(ipaddr_filter_out[0]))
    return [str(ipaddress.ip_interface(ip_a)) for ip_a in ipaddr_filter_out]


# --- salt/utils/network.py: _network_hosts
def _network_hosts(ip_addr_entry):
    return [
        str(host) for host in ipaddress.ip_network(ip_addr_entry, strict=False).hosts()
    ]


# --- salt/utils/network.py: network_hosts
@jinja_filter("network_hosts")
def network_hosts(value, options=None, version=None):
    ipaddr_filter_out = _filter_ipaddr(value, options=options, version=version)
    if not ipaddr_filter_out:
        return
    if not isinstance(value, (list, tuple, types.GeneratorType)):
        return _network_hosts(ipaddr_filter_out[0])
    return [_network_hosts(ip_a) for ip_a in ipaddr_filter_out]


# --- salt/utils/network.py: _network_size
def _network_size(ip_addr_entry):
    return ipaddress.ip_network(ip_addr_entry, strict=False).num_addresses


# --- salt/utils/network.py: network_size
@jinja_filter("network_size")
def network_size(value, options=None, version=None):
    ipaddr_filter_out = _filter_ipaddr(value, options=options, version=version)
    if not ipaddr_filter_out:
        return
    if not isinstance(value, (list, tuple, types.GeneratorType)):
        return _network_size(ipaddr_filter_out[0])
    return [_network_size(ip_a) for ip_a in ipaddr_filter_out]


# --- salt/utils/network.py: gen_mac
@jinja_filter("gen_mac")
def gen_mac(prefix="AC:DE:48"):
    return "{}:{:02X}:{:02X}:{:02X}".format(
        prefix,
        random.randint(0, 0xFF),
        random.randint(0, 0xFF),
        random.randint(0, 0xFF),
    )


# --- salt/utils/network.py: mac_str_to_bytes
@jinja_filter("mac_str_to_bytes")
def mac_str_to_bytes(mac_str):
    if len(mac_str) == 12:
        pass
    elif len(mac_str) == 17:
        sep = mac_str[2]
        mac_str = mac_str.replace(sep, "")
    else:
        raise ValueError("Invalid MAC address")
    chars = (int(mac_str[s : s + 2], 16) for s in range(0, 12, 2))
    return bytes(chars)


# --- salt/utils/network.py: filter_by_networks
@jinja_filter("filter_by_networks")
def filter_by_networks(values, networks):

    def _filter(ips, networks):
        return [ip for ip in ips for net in networks if ipaddress.ip_address(ip) in net]

    if networks is not None:
        networks = [ipaddress.ip_network(network) for network in networks]
        if isinstance(values, Mapping):
            return {
                interface: _filter(values[interface], networks) for interface in values
            }
        elif isinstance(values, Sequence):
            return _filter(values, networks)
        else:
            raise ValueError(f"Do not know how to filter a {type(values)}")
    else:
        return values


# --- salt/utils/network.py: ipwrap
@jinja_filter("ipwrap")
def ipwrap(data):

    if isinstance(data, (list, tuple)):
        ret = []
        for element in data:
            if _is_ipv(element, 6, options=None):
                element = ip_bracket(element)
            ret.append(element)
    else:
        if _is_ipv(data, 6, options=None):
            data = ip_bracket(data)
        ret = data
    return ret


# --- salt/utils/network.py: ip_bracket
def ip_bracket(addr, strip=False):
    addr = str(addr)
    addr = addr.lstrip("[")
    addr = addr.rstrip("]")
    addr = ipaddress.ip_address(addr)
    return ("[{}]" if addr.version == 6 and not strip else "{}").format(addr)

# --- salt/utils/jinja.py: from _yaml_safe_repr to the end (unchanged)
def _yaml_safe_repr(value):
    """
    Return a YAML-safe repr for a string value.

    Python's ``repr()`` of a string containing a newline produces ``'foo\\nbar'``
    where ``\\n`` is the two-character backslash-n escape sequence. When such a
    repr is embedded into a YAML state file via Jinja interpolation (e.g.
    ``{{ some_dict }}``), the YAML parser sees the literal ``\\n`` and not an
    actual newline, breaking multi-line scalars loaded via ``import_yaml``.

    For strings containing characters that would be escaped by ``repr()`` in a
    way YAML wouldn't round-trip (newlines, tabs, etc.), emit a YAML
    double-quoted scalar instead. Otherwise fall back to ``repr()`` for
    backward compatibility.

    See https://github.com/saltstack/salt/issues/30690
    """
    if isinstance(value, str) and any(c in value for c in "\n\r\t"):
        # safe_dump always emits a trailing newline; strip it. default_style='"'
        # forces a double-quoted scalar which encodes newlines as the YAML \n
        # escape sequence that the YAML parser will decode back to a real
        # newline. width=2**31-1 disables PyYAML's default line-folding at
        # ~80 columns; folding would introduce real newlines inside the
        # scalar, which breaks YAML block-scalar interpolation via Jinja
        # (see issue #69658).
        return (
            safe_dump(
                value,
                default_style='"',
                default_flow_style=True,
                width=2**31 - 1,
            )
            .rstrip("\n")
            .rstrip("...")
            .rstrip("\n")
        )
    return repr(value)


class PrintableDict(OrderedDict):
    """
    Ensures that dict str() and repr() are YAML friendly.

    .. code-block:: python

        mapping = OrderedDict([('a', 'b'), ('c', None)])
        print mapping
        # OrderedDict([('a', 'b'), ('c', None)])

        decorated = PrintableDict(mapping)
        print decorated
        # {'a': 'b', 'c': None}
    """

    def __str__(self):
        output = []
        for key, value in self.items():
            if isinstance(value, str):
                # keeps quotes around strings; use YAML-safe quoting for
                # strings containing newlines (see issue #30690)
                output.append(f"{key!r}: {_yaml_safe_repr(value)}")
            else:
                # let default output
                output.append(f"{key!r}: {value!s}")
        return "{" + ", ".join(output) + "}"

    def __repr__(self):  # pylint: disable=W0221
        output = []
        for key, value in self.items():
            # Raw string formatter required here because this is a repr
            # function. Use YAML-safe quoting for strings containing newlines
            # (see issue #30690).
            if isinstance(value, str):
                output.append(f"{key!r}: {_yaml_safe_repr(value)}")
            else:
                output.append(f"{key!r}: {value!r}")
        return "{" + ", ".join(output) + "}"


# Additional globals
@jinja_global("raise")
def jinja_raise(msg):
    raise TemplateError(msg)


# Additional tests
@jinja_test("match")
def test_match(txt, rgx, ignorecase=False, multiline=False):
    """Returns true if a sequence of chars matches a pattern."""
    flag = 0
    if ignorecase:
        flag |= re.I
    if multiline:
        flag |= re.M
    compiled_rgx = re.compile(rgx, flag)
    return True if compiled_rgx.match(txt) else False


@jinja_test("equalto")
def test_equalto(value, other):
    """Returns true if two values are equal."""
    return value == other


# Additional filters
@jinja_filter("skip")
def skip_filter(data):
    """
    Suppress data output

    .. code-block:: yaml

        {% my_string = "foo" %}

        {{ my_string|skip }}

    will be rendered as empty string,

    """
    return ""


@jinja_filter("sequence")
def ensure_sequence_filter(data):
    """
    Ensure sequenced data.

    **sequence**

        ensure that parsed data is a sequence

    .. code-block:: jinja

        {% set my_string = "foo" %}
        {% set my_list = ["bar", ] %}
        {% set my_dict = {"baz": "qux"} %}

        {{ my_string|sequence|first }}
        {{ my_list|sequence|first }}
        {{ my_dict|sequence|first }}


    will be rendered as:

    .. code-block:: yaml

        foo
        bar
        baz
    """
    if not isinstance(data, (list, tuple, set, dict)):
        return [data]
    return data


@jinja_filter("to_bool")
def to_bool(val):
    """
    Returns the logical value.

    .. code-block:: jinja

        {{ 'yes' | to_bool }}

    will be rendered as:

    .. code-block:: text

        True
    """
    if val is None:
        return False
    if isinstance(val, bool):
        return val
    if isinstance(val, (str, (str,))):
        return val.lower() in ("yes", "1", "true")
    if isinstance(val, int):
        return val > 0
    if not isinstance(val, Hashable):
        return len(val) > 0
    return False


@jinja_filter("indent")
def indent(s, width=4, first=False, blank=False, indentfirst=None):
    """
    A ported version of the "indent" filter containing a fix for indenting Markup
    objects. If the minion has Jinja version 2.11 or newer, the "indent" filter
    from upstream will be used, and this one will be ignored.
    """
    if indentfirst is not None:
        warnings.warn(
            "The 'indentfirst' argument is renamed to 'first' and will"
            " be removed in Jinja 3.0.",
            DeprecationWarning,
            stacklevel=2,
        )
        first = indentfirst

    indention = " " * width
    newline = "\n"

    if isinstance(s, Markup):
        indention = Markup(indention)
        newline = Markup(newline)

    s += newline  # this quirk is necessary for splitlines method

    if blank:
        rv = (newline + indention).join(s.splitlines())
    else:
        lines = s.splitlines()
        rv = lines.pop(0)

        if lines:
            rv += newline + newline.join(
                indention + line if line else line for line in lines
            )

    if first:
        rv = indention + rv

    return rv


@jinja_filter("quote")
def quote(txt):
    """
    Wraps a text around quotes.

    .. code-block:: jinja

        {% set my_text = 'my_text' %}
        {{ my_text | quote }}

    will be rendered as:

    .. code-block:: text

        'my_text'
    """
    return shlex.quote(txt)


@jinja_filter()
def regex_escape(value):
    return re.escape(value)


@jinja_filter("regex_search")
def regex_search(txt, rgx, ignorecase=False, multiline=False):
    """
    Searches for a pattern in the text.

    .. code-block:: jinja

        {% set my_text = 'abcd' %}
        {{ my_text | regex_search('^(.*)BC(.*)$', ignorecase=True) }}

    will be rendered as:

    .. code-block:: text

        ('a', 'd')
    """
    flag = 0
    if ignorecase:
        flag |= re.I
    if multiline:
        flag |= re.M
    obj = re.search(rgx, txt, flag)
    if not obj:
        return
    # Handle regular expressions which do not not use grouping
    if obj and not obj.groups():
        return (obj.group(),)
    return obj.groups()


@jinja_filter("regex_match")
def regex_match(txt, rgx, ignorecase=False, multiline=False):
    """
    Searches for a pattern in the text.

    .. code-block:: jinja

        {% set my_text = 'abcd' %}
        {{ my_text | regex_match('^(.*)BC(.*)$', ignorecase=True) }}

    will be rendered as:

    .. code-block:: text

        ('a', 'd')
    """
    flag = 0
    if ignorecase:
        flag |= re.I
    if multiline:
        flag |= re.M
    obj = re.match(rgx, txt, flag)
    if not obj:
        return
    # Handle regular expressions which do not use grouping
    if obj and not obj.groups():
        return (obj.group(),)
    return obj.groups()


@jinja_filter("regex_replace")
def regex_replace(txt, rgx, val, ignorecase=False, multiline=False):
    r"""
    Searches for a pattern and replaces with a sequence of characters.

    .. code-block:: jinja

        {% set my_text = 'lets replace spaces' %}
        {{ my_text | regex_replace('\s+', '__') }}

    will be rendered as:

    .. code-block:: text

        lets__replace__spaces
    """
    flag = 0
    if ignorecase:
        flag |= re.I
    if multiline:
        flag |= re.M
    compiled_rgx = re.compile(rgx, flag)
    return compiled_rgx.sub(val, txt)


@jinja_filter("uuid")
def uuid_(val):
    """
    Returns a UUID corresponding to the value passed as argument.

    .. code-block:: jinja

        {{ 'example' | uuid }}

    will be rendered as:

    .. code-block:: text

        f4efeff8-c219-578a-bad7-3dc280612ec8
    """
    return str(uuid.uuid5(GLOBAL_UUID, to_str(val)))


### List-related filters


@jinja_filter()
def unique(values):
    """
    Removes duplicates from a list.

    .. code-block:: jinja

        {% set my_list = ['a', 'b', 'c', 'a', 'b'] -%}
        {{ my_list | unique }}

    will be rendered as:

    .. code-block:: text

        ['a', 'b', 'c']
    """
    ret = None
    if isinstance(values, Hashable):
        ret = set(values)
    else:
        ret = []
        for value in values:
            if value not in ret:
                ret.append(value)
    return ret


@jinja_filter("min")
def lst_min(obj):
    """
    Returns the min value.

    .. code-block:: jinja

        {% set my_list = [1,2,3,4] -%}
        {{ my_list | min }}

    will be rendered as:

    .. code-block:: text

        1
    """
    return min(obj)


@jinja_filter("max")
def lst_max(obj):
    """
    Returns the max value.

    .. code-block:: jinja

        {% my_list = [1,2,3,4] -%}
        {{ set my_list | max }}

    will be rendered as:

    .. code-block:: text

        4
    """
    return max(obj)


@jinja_filter("avg")
def lst_avg(lst):
    """
    Returns the average value of a list.

    .. code-block:: jinja

        {% my_list = [1,2,3,4] -%}
        {{ set my_list | avg }}

    will be rendered as:

    .. code-block:: yaml

        2.5
    """
    if not isinstance(lst, Hashable):
        return float(sum(lst) / len(lst))
    return float(lst)


@jinja_filter("union")
def union(lst1, lst2):
    """
    Returns the union of two lists.

    .. code-block:: jinja

        {% my_list = [1,2,3,4] -%}
        {{ set my_list | union([2, 4, 6]) }}

    will be rendered as:

    .. code-block:: text

        [1, 2, 3, 4, 6]
    """
    if isinstance(lst1, Hashable) and isinstance(lst2, Hashable):
        return set(lst1) | set(lst2)
    return unique(lst1 + lst2)


@jinja_filter("intersect")
def intersect(lst1, lst2):
    """
    Returns the intersection of two lists.

    .. code-block:: jinja

        {% my_list = [1,2,3,4] -%}
        {{ set my_list | intersect([2, 4, 6]) }}

    will be rendered as:

    .. code-block:: text

        [2, 4]
    """
    if isinstance(lst1, Hashable) and isinstance(lst2, Hashable):
        return set(lst1) & set(lst2)
    return unique([ele for ele in lst1 if ele in lst2])


@jinja_filter("difference")
def difference(lst1, lst2):
    """
    Returns the difference of two lists.

    .. code-block:: jinja

        {% my_list = [1,2,3,4] -%}
        {{ set my_list | difference([2, 4, 6]) }}

    will be rendered as:

    .. code-block:: text

        [1, 3, 6]
    """
    if isinstance(lst1, Hashable) and isinstance(lst2, Hashable):
        return set(lst1) - set(lst2)
    return unique([ele for ele in lst1 if ele not in lst2])


@jinja_filter("symmetric_difference")
def symmetric_difference(lst1, lst2):
    """
    Returns the symmetric difference of two lists.

    .. code-block:: jinja

        {% my_list = [1,2,3,4] -%}
        {{ set my_list | symmetric_difference([2, 4, 6]) }}

    will be rendered as:

    .. code-block:: text

        [1, 3]
    """
    if isinstance(lst1, Hashable) and isinstance(lst2, Hashable):
        return set(lst1) ^ set(lst2)
    return unique(
        [ele for ele in union(lst1, lst2) if ele not in intersect(lst1, lst2)]
    )


@jinja_filter("method_call")
def method_call(obj, f_name, *f_args, **f_kwargs):
    return getattr(obj, f_name, lambda *args, **kwargs: None)(*f_args, **f_kwargs)


try:
    pass_context = jinja2.pass_context
except AttributeError:
    # Old and deprecated method
    pass_context = jinja2.contextfunction


@pass_context
def show_full_context(ctx):
    return simple_types_filter(
        {key: value for key, value in ctx.items()}
    )


def __get_strict_undefined(value, ids):
    if id(value) in ids:
        return []
    ids.add(id(value))
    undefined = []
    if isinstance(value, jinja2.StrictUndefined):
        undefined.append(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            # StrictUndefined cant be a key in dict, but still check for other mapping types
            undefined.extend(__get_strict_undefined(key, ids))
            undefined.extend(__get_strict_undefined(item, ids))
    elif isinstance(value, Sequence) and not isinstance(value, str):
        for item in value:
            undefined.extend(__get_strict_undefined(item, ids))
    return undefined


def _get_strict_undefined(value):
    return tuple(__get_strict_undefined(value, set()))


def _join_strict_undefined(undefined):
    return jinja2.StrictUndefined("\n".join(u._undefined_message for u in undefined))


def _handle_strict_undefined(function):
    @wraps(function)
    def __handle_strict_undefined(value, *args, **kwargs):
        undefined = _get_strict_undefined(value)
        if undefined:
            return _join_strict_undefined(undefined)
        return function(value, *args, **kwargs)

    return __handle_strict_undefined


def _handle_method_strict_undefined(function):
    @wraps(function)
    def __handle_method_strict_undefined(self, value, *args, **kwargs):
        undefined = _get_strict_undefined(value)
        if undefined:
            return _join_strict_undefined(undefined)
        return function(self, value, *args, **kwargs)

    return __handle_method_strict_undefined


@jinja_filter("tojson")
@_handle_strict_undefined
def tojson(val, indent=None, **options):
    """
    Implementation of tojson filter (only present in Jinja 2.9 and later).
    Unlike the Jinja built-in filter, this allows arbitrary options to be
    passed in to the underlying JSON library.
    """
    options.setdefault("ensure_ascii", True)
    if indent is not None:
        options["indent"] = indent
    return (
        dumps(val, **options)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("'", "\\u0027")
    )


class SerializerExtension(Extension):
    '''
    Yaml and Json manipulation.

    **Format filters**

    Allows jsonifying or yamlifying any data structure. For example, this dataset:

    .. code-block:: python

        data = {
            'foo': True,
            'bar': 42,
            'baz': [1, 2, 3],
            'qux': 2.0
        }

    .. code-block:: jinja

        yaml = {{ data|yaml }}
        json = {{ data|json }}
        python = {{ data|python }}
        xml  = {{ {'root_node': data}|xml }}

    will be rendered as::

        yaml = {bar: 42, baz: [1, 2, 3], foo: true, qux: 2.0}
        json = {"baz": [1, 2, 3], "foo": true, "bar": 42, "qux": 2.0}
        python = {'bar': 42, 'baz': [1, 2, 3], 'foo': True, 'qux': 2.0}
        xml = """<<?xml version="1.0" ?>
                 <root_node bar="42" foo="True" qux="2.0">
                  <baz>1</baz>
                  <baz>2</baz>
                  <baz>3</baz>
                 </root_node>"""

    The yaml filter takes an optional flow_style parameter to control the
    default-flow-style parameter of the YAML dumper.

    .. code-block:: jinja

        {{ data|yaml(False) }}

    will be rendered as:

    .. code-block:: yaml

        bar: 42
        baz:
          - 1
          - 2
          - 3
        foo: true
        qux: 2.0

    **Load filters**

    Strings and variables can be deserialized with **load_yaml** and
    **load_json** tags and filters. It allows one to manipulate data directly
    in templates, easily:

    .. code-block:: jinja

        {%- set yaml_src = "{foo: it works}"|load_yaml %}
        {%- set json_src = '{"bar": "for real"}'|load_json %}
        Dude, {{ yaml_src.foo }} {{ json_src.bar }}!

    will be rendered as::

        Dude, it works for real!

    **Load tags**

    Salt implements ``load_yaml`` and ``load_json`` tags. They work like
    the `import tag`_, except that the document is also deserialized.

    Syntaxes are ``{% load_yaml as [VARIABLE] %}[YOUR DATA]{% endload %}``
    and ``{% load_json as [VARIABLE] %}[YOUR DATA]{% endload %}``

    For example:

    .. code-block:: jinja

        {% load_yaml as yaml_src %}
            foo: it works
        {% endload %}
        {% load_json as json_src %}
            {
                "bar": "for real"
            }
        {% endload %}
        Dude, {{ yaml_src.foo }} {{ json_src.bar }}!

    will be rendered as::

        Dude, it works for real!

    **Import tags**

    External files can be imported and made available as a Jinja variable.

    .. code-block:: jinja

        {% import_yaml "myfile.yml" as myfile %}
        {% import_json "defaults.json" as defaults %}
        {% import_text "completeworksofshakespeare.txt" as poems %}

    **Catalog**

    ``import_*`` and ``load_*`` tags will automatically expose their
    target variable to import. This feature makes catalog of data to
    handle.

    for example:

    .. code-block:: jinja

        # doc1.sls
        {% load_yaml as var1 %}
            foo: it works
        {% endload %}
        {% load_yaml as var2 %}
            bar: for real
        {% endload %}

    .. code-block:: jinja

        # doc2.sls
        {% from "doc1.sls" import var1, var2 as local2 %}
        {{ var1.foo }} {{ local2.bar }}

    ** Escape Filters **

    .. versionadded:: 2017.7.0

    Allows escaping of strings so they can be interpreted literally by another
    function.

    For example:

    .. code-block:: jinja

        regex_escape = {{ 'https://example.com?foo=bar%20baz' | regex_escape }}

    will be rendered as::

        regex_escape = https\\:\\/\\/example\\.com\\?foo\\=bar\\%20baz

    ** Set Theory Filters **

    .. versionadded:: 2017.7.0

    Performs set math using Jinja filters.

    For example:

    .. code-block:: jinja

        unique = {{ ['foo', 'foo', 'bar'] | unique }}

    will be rendered as::

        unique = ['foo', 'bar']

    ** Salt State Parameter Format Filters **

    .. versionadded:: 3005

    Renders a formatted multi-line YAML string from a Python dictionary. Each
    key/value pair in the dictionary will be added as a single-key dictionary
    to a list that will then be sent to the YAML formatter.

    For example:

    .. code-block:: jinja

        {% set thing_params = {
            "name": "thing",
            "changes": True,
            "warnings": "OMG! Stuff is happening!"
           }
        %}

        thing:
          test.configurable_test_state:
            {{ thing_params | dict_to_sls_yaml_params | indent }}

    will be rendered as::

    .. code-block:: yaml

        thing:
          test.configurable_test_state:
            - name: thing
            - changes: true
            - warnings: OMG! Stuff is happening!

    .. _jinja-fileopts:

    **Jinja Environment Configuration Override**

    .. versionadded:: 3006.28

    A header can be added to a jinja (or jinja|yaml, etc.) template to override
    the jinja environment configuration for that template only. This lets an
    individual file -- notably a third-party formula -- opt in or out of
    options such as ``trim_blocks`` and ``lstrip_blocks`` without changing the
    global :conf_master:`jinja_env` / :conf_master:`jinja_sls_env` settings,
    which would otherwise force the same options onto every template and can
    break unrelated states or formulas.

    The header is a single line beginning with ``#jinja2:`` followed by a JSON
    object whose keys are `Jinja2 Environment`_ settings. It is honored on the
    first line of the template, or on the line immediately following a renderer
    shebang (e.g. ``#!jinja|yaml``), since the shebang is not stripped before
    the jinja renderer runs. The recognized header line is removed before
    rendering; a ``#jinja2:`` line anywhere else in the template is left
    untouched.

    For example:

    .. code-block:: jinja

        #jinja2: {"lstrip_blocks": true, "trim_blocks": true}
        thing:
        {% for n in range(1, 6) %}
          - some thing {{ n }}
        {% endfor %}

    or, combined with a renderer shebang:

    .. code-block:: jinja

        #!jinja|yaml
        #jinja2: {"lstrip_blocks": true, "trim_blocks": true}
        thing:
        {% for n in range(1, 6) %}
          - some thing {{ n }}
        {% endfor %}

    both render as:

    .. code-block:: yaml

        thing:
          - some thing 1
          - some thing 2
          - some thing 3
          - some thing 4
          - some thing 5

    .. _`import tag`: https://jinja.palletsprojects.com/en/2.11.x/templates/#import
    .. _`Jinja2 Environment`: https://jinja.palletsprojects.com/en/stable/api/#jinja2.Environment
    '''

    tags = {
        "load_yaml",
        "load_json",
        "import_yaml",
        "import_json",
        "load_text",
        "import_text",
        "profile",
    }

    def __init__(self, environment):
        super().__init__(environment)
        self.environment.filters.update(
            {
                "yaml": self.format_yaml,
                "json": self.format_json,
                "xml": self.format_xml,
                "python": self.format_python,
                "load_yaml": self.load_yaml,
                "load_json": self.load_json,
                "load_text": self.load_text,
                "dict_to_sls_yaml_params": self.dict_to_sls_yaml_params,
                "combinations": _handle_strict_undefined(itertools.combinations),
                "combinations_with_replacement": _handle_strict_undefined(
                    itertools.combinations_with_replacement
                ),
                "compress": _handle_strict_undefined(itertools.compress),
                "permutations": _handle_strict_undefined(itertools.permutations),
                "product": _handle_strict_undefined(itertools.product),
                "zip": _handle_strict_undefined(zip),
                "zip_longest": _handle_strict_undefined(itertools.zip_longest),
            }
        )

        if self.environment.finalize is None:
            self.environment.finalize = self.finalizer
        else:
            finalizer = self.environment.finalize

            @wraps(finalizer)
            def wrapper(self, data):
                return finalizer(self.finalizer(data))

            self.environment.finalize = wrapper

    def finalizer(self, data):
        """
        Ensure that printed mappings are YAML friendly.
        """

        def explore(data):
            if isinstance(data, (dict, OrderedDict)):
                return PrintableDict(
                    [(key, explore(value)) for key, value in data.items()]
                )
            elif isinstance(data, (list, tuple, set)):
                return data.__class__([explore(value) for value in data])
            return data

        return explore(data)

    @_handle_method_strict_undefined
    def format_json(self, value, sort_keys=True, indent=None):
        json_txt = dumps(
            value, sort_keys=sort_keys, indent=indent
        ).strip()
        try:
            return Markup(json_txt)
        except UnicodeDecodeError:
            return Markup(to_unicode(json_txt))

    @_handle_method_strict_undefined
    def format_yaml(self, value, flow_style=True):
        yaml_txt = safe_dump(
            value, default_flow_style=flow_style
        ).strip()
        if yaml_txt.endswith("\n..."):
            yaml_txt = yaml_txt[: len(yaml_txt) - 4]
        try:
            return Markup(yaml_txt)
        except UnicodeDecodeError:
            return Markup(to_unicode(yaml_txt))

    @_handle_method_strict_undefined
    def format_xml(self, value):
        """Render a formatted multi-line XML string from a complex Python
        data structure. Supports tag attributes and nested dicts/lists.

        :param value: Complex data structure representing XML contents
        :returns: Formatted XML string rendered with newlines and indentation
        :rtype: str
        """

        def normalize_iter(value):
            if isinstance(value, (list, tuple)):
                if isinstance(value[0], str):
                    xmlval = value
                else:
                    xmlval = []
            elif isinstance(value, dict):
                xmlval = list(value.items())
            else:
                raise TemplateRuntimeError(
                    "Value is not a dict or list. Cannot render as XML"
                )
            return xmlval

        def recurse_tree(xmliter, element=None):
            sub = None
            for tag, attrs in xmliter:
                if isinstance(attrs, list):
                    for attr in attrs:
                        recurse_tree(((tag, attr),), element)
                elif element is not None:
                    sub = SubElement(element, tag)
                else:
                    sub = Element(tag)
                if isinstance(attrs, (str, int, bool, float)):
                    sub.text = str(attrs)
                    continue
                if isinstance(attrs, dict):
                    sub.attrib = {
                        attr: str(val)
                        for attr, val in attrs.items()
                        if not isinstance(val, (dict, list))
                    }
                for tag, val in [
                    item
                    for item in normalize_iter(attrs)
                    if isinstance(item[1], (dict, list))
                ]:
                    recurse_tree(((tag, val),), sub)
            return sub

        return Markup(
            minidom.parseString(
                tostring(recurse_tree(normalize_iter(value)))
            ).toprettyxml(indent=" ")
        )

    @_handle_method_strict_undefined
    def format_python(self, value):
        return Markup(pprint.pformat(value).strip())

    @_handle_method_strict_undefined
    def load_yaml(self, value):
        if isinstance(value, TemplateModule):
            value = str(value)
        try:
            return decode(safe_load(value))
        except YAMLError as exc:
            msg = "Encountered error loading yaml: "
            try:
                # Reported line is off by one, add 1 to correct it
                line = exc.problem_mark.line + 1
                buf = exc.problem_mark.buffer
                problem = exc.problem
            except AttributeError:
                # No context information available in the exception, fall back
                # to the stringified version of the exception.
                msg += str(exc)
            else:
                if buf is None:
                    # The libyaml (C) loader populates problem_mark but leaves
                    # its buffer unset, so there is no source text to render
                    # context from; fall back to the stringified exception
                    # rather than crash in get_context.
                    msg += str(exc)
                else:
                    msg += f"{problem}\n"
                    msg += get_context(
                        buf, line, marker="    <======================"
                    )
            raise TemplateRuntimeError(msg)
        except AttributeError:
            raise TemplateRuntimeError(f"Unable to load yaml from {value}")

    @_handle_method_strict_undefined
    def load_json(self, value):
        if isinstance(value, TemplateModule):
            value = str(value)
        try:
            return loads(value)
        except (ValueError, TypeError, AttributeError):
            raise TemplateRuntimeError(f"Unable to load json from {value}")

    @_handle_method_strict_undefined
    def load_text(self, value):
        if isinstance(value, TemplateModule):
            value = str(value)

        return value

    _load_parsers = {"load_yaml", "load_json", "load_text"}
    _import_parsers = {"import_yaml", "import_json", "import_text"}

    def parse(self, parser):
        if parser.stream.current.value in self._load_parsers:
            return self.parse_load(parser)
        elif parser.stream.current.value in self._import_parsers:
            return self.parse_import(
                parser, parser.stream.current.value.split("_", 1)[1]
            )
        elif parser.stream.current.value == "profile":
            return self.parse_profile(parser)

        parser.fail(
            "Unknown format " + parser.stream.current.value,
            parser.stream.current.lineno,
        )

    # pylint: disable=E1120,E1121
    def parse_profile(self, parser):
        lineno = next(parser.stream).lineno
        parser.stream.expect("name:as")
        label = parser.parse_expression()
        body = parser.parse_statements(["name:endprofile"], drop_needle=True)
        return self._parse_profile_block(parser, label, "profile block", body, lineno)

    def _create_profile_id(self, parser):
        return f"_salt_profile_{parser.free_identifier().name}"

    def _profile_start(self, label, source):
        return (label, source, time.time())

    def _profile_end(self, label, source, previous_time):
        log.profile(
            "Time (in seconds) to render %s '%s': %s",
            source,
            label,
            time.time() - previous_time,
        )

    def _parse_profile_block(self, parser, label, source, body, lineno):
        profile_id = self._create_profile_id(parser)
        ret = (
            [
                nodes.Assign(
                    nodes.Name(profile_id, "store").set_lineno(lineno),
                    self.call_method(
                        "_profile_start",
                        dyn_args=nodes.List([label, nodes.Const(source)]).set_lineno(
                            lineno
                        ),
                    ).set_lineno(lineno),
                ).set_lineno(lineno),
            ]
            + body
            + [
                nodes.ExprStmt(
                    self.call_method(
                        "_profile_end", dyn_args=nodes.Name(profile_id, "load")
                    ),
                ).set_lineno(lineno),
            ]
        )
        return ret

    def parse_load(self, parser):
        filter_name = parser.stream.current.value
        lineno = next(parser.stream).lineno
        if filter_name not in self.environment.filters:
            parser.fail(f"Unable to parse {filter_name}", lineno)

        parser.stream.expect("name:as")
        target = parser.parse_assign_target()
        macro_name = "_" + parser.free_identifier().name
        macro_body = parser.parse_statements(("name:endload",), drop_needle=True)

        return [
            nodes.Macro(macro_name, [], [], macro_body).set_lineno(lineno),
            nodes.Assign(
                target,
                nodes.Filter(
                    nodes.Call(
                        nodes.Name(macro_name, "load").set_lineno(lineno),
                        [],
                        [],
                        None,
                        None,
                    ).set_lineno(lineno),
                    filter_name,
                    [],
                    [],
                    None,
                    None,
                ).set_lineno(lineno),
            ).set_lineno(lineno),
        ]

    def parse_import(self, parser, converter):
        import_node = parser.parse_import()
        target = import_node.target
        lineno = import_node.lineno

        body = [
            import_node,
            nodes.Assign(
                nodes.Name(target, "store").set_lineno(lineno),
                nodes.Filter(
                    nodes.Name(target, "load").set_lineno(lineno),
                    f"load_{converter}",
                    [],
                    [],
                    None,
                    None,
                ).set_lineno(lineno),
            ).set_lineno(lineno),
        ]
        return self._parse_profile_block(
            parser, import_node.template, f"import_{converter}", body, lineno
        )

    @_handle_method_strict_undefined
    def dict_to_sls_yaml_params(self, value, flow_style=False):
        """
        .. versionadded:: 3005

        Render a formatted multi-line YAML string from a Python dictionary. Each
        key/value pair in the dictionary will be added as a single-key dictionary
        to a list that will then be sent to the YAML formatter.

        :param value: Python dictionary representing Salt state parameters

        :param flow_style: Setting flow_style to False will enforce indentation
                           mode

        :returns: Formatted SLS YAML string rendered with newlines and
                  indentation
        """
        return self.format_yaml(
            [{key: val} for key, val in value.items()], flow_style=flow_style
        )
CONFIG_DEFAULTS = {'mongo.db': 'salt', 'mongo.password': '', 'mongo.port': 27017, 'mongo.user': '', 'redis.db': '0', 'redis.host': 'salt', 'redis.port': 6379, 'test.foo': 'unconfigured', 'ca.cert_base_path': '/etc/pki', 'solr.cores': [], 'solr.host': 'localhost', 'solr.port': '8983', 'solr.baseurl': '/solr', 'solr.type': 'master', 'solr.request_timeout': None, 'solr.init_script': '/etc/rc.d/solr', 'solr.dih.import_options': {'clean': False, 'optimize': True, 'commit': True, 'verbose': False}, 'solr.backup_path': None, 'solr.num_backups': 1, 'poudriere.config': '/usr/local/etc/poudriere.conf', 'poudriere.config_dir': '/usr/local/etc/poudriere.d', 'ldap.uri': '', 'ldap.server': 'localhost', 'ldap.port': '389', 'ldap.tls': False, 'ldap.no_verify': False, 'ldap.anonymous': True, 'ldap.scope': 2, 'ldap.attrs': None, 'ldap.binddn': '', 'ldap.bindpw': '', 'hosts.file': '/etc/hosts', 'aliases.file': '/etc/aliases', 'virt': {'tunnel': False, 'images': '/srv/salt-images'}, 'docker.exec_driver': 'docker-exec', 'docker.compare_container_networks': {'static': ['Aliases', 'Links', 'IPAMConfig'], 'automatic': ['IPAddress', 'Gateway', 'GlobalIPv6Address', 'IPv6Gateway']}}


# ---------------------------------------------------------------------------------------
# sylvite: everything below is the worker's own code, following Salt 3008.5 line by line
# where it matters (template.py, templates.py, renderers/*.py, modules/*.py).
# ---------------------------------------------------------------------------------------


def _merge_recursive_aggregate(obj_a, obj_b, level=1):  # salt.serializers.yamlex (plain data)
    return merge_recurse(obj_a, obj_b)


class RenderState:
    """The request being rendered (one at a time per worker)."""

    def __init__(self, req):
        ctx = req.get("context") or {}
        self.req = req
        self.context = ctx
        self.opts = ctx.get("opts") if isinstance(ctx.get("opts"), dict) else {}
        self.grains = ctx.get("grains") if isinstance(ctx.get("grains"), dict) else self.opts.get("grains", {}) or {}
        self.pillar = ctx.get("pillar") if isinstance(ctx.get("pillar"), dict) else {}
        self.roots = [str(r) for r in req.get("roots") or []]
        self.saltenv = req.get("saltenv") or "base"


STATE = None


# --- the `salt` dict: master-side functions with Salt's module semantics -------------
class NotAvailable(CommandExecutionError):
    pass


def _grains_get(key, default="", delimiter=DEFAULT_TARGET_DELIM, ordered=True):
    grains = STATE.grains
    if ordered is not True:
        grains = loads(dumps(grains))
    return traverse_dict_and_list(grains, key, default, delimiter)


def _grains_item(*args, **kwargs):
    ret = {}
    default = kwargs.get("default", "")
    delimiter = kwargs.get("delimiter", DEFAULT_TARGET_DELIM)
    try:
        for arg in args:
            ret[arg] = traverse_dict_and_list(STATE.grains, arg, default, delimiter)
    except KeyError:
        pass
    return ret


def _grains_items(sanitize=False):
    return dict(STATE.grains)


def _grains_filter_by(lookup_dict, grain="os_family", merge=None, default="default", base=None):
    return data_filter_by(lookup_dict=lookup_dict, lookup=grain, traverse=STATE.grains,
                          merge=merge, default=default, base=base)


def _grains_ls():
    return sorted(STATE.grains)


_NOT_SET = object()


def _pillar_get(key, default=_NOT_SET, merge=False, merge_nested_lists=None,
                delimiter=DEFAULT_TARGET_DELIM, pillarenv=None, saltenv=None, unmask=None):
    opts = STATE.opts
    if default is _NOT_SET:
        default = KeyError
    if not opts.get("pillar_raise_on_missing"):
        if default is KeyError:
            default = ""
    opt_merge_lists = opts.get("pillar_merge_lists", False) if merge_nested_lists is None else merge_nested_lists
    pillar_dict = STATE.pillar
    if merge:
        if isinstance(default, dict):
            ret = traverse_dict_and_list(pillar_dict, key, {}, delimiter)
            if isinstance(ret, Mapping):
                default = copy.deepcopy(default)
                return update(default, ret, merge_lists=opt_merge_lists)
            else:
                log.error("pillar.get: Default (%s) is a dict, but the returned pillar value (%s) is of type "
                          "'%s'. Merge will be skipped.", default, ret, type(ret).__name__)
        elif isinstance(default, list):
            ret = traverse_dict_and_list(pillar_dict, key, [], delimiter)
            if isinstance(ret, list):
                default = copy.deepcopy(default)
                default.extend([x for x in ret if x not in default])
                return default
            else:
                log.error("pillar.get: Default (%s) is a list, but the returned pillar value (%s) is of type "
                          "'%s'. Merge will be skipped.", default, ret, type(ret).__name__)
        else:
            log.error("pillar.get: Default (%s) is of type '%s', must be a dict or list to merge. Merge will "
                      "be skipped.", default, type(default).__name__)
    ret = traverse_dict_and_list(pillar_dict, key, default, delimiter)
    if ret is KeyError:
        raise KeyError(f"Pillar key not found: {key}")
    return ret


def _pillar_item(*args, default=None, delimiter=None, pillarenv=None, saltenv=None, unmask=None):
    ret = {}
    if default is None:
        default = ""
    if delimiter is None:
        delimiter = DEFAULT_TARGET_DELIM
    try:
        for arg in args:
            ret[arg] = traverse_dict_and_list(data=STATE.pillar, key=arg, default=default, delimiter=delimiter)
    except KeyError:
        pass
    return ret


def _pillar_items(*args, **kwargs):
    if args:
        return _pillar_item(*args, **{k: v for k, v in kwargs.items() if k in ("pillarenv", "saltenv")})
    # Salt recompiles the pillar here; the pillar being rendered is what sylvite has.
    return dict(STATE.pillar)


def _sdb_get(value):
    return value


def _config_get(key, default="", delimiter=DEFAULT_TARGET_DELIM, merge=None, omit_opts=False,
                omit_pillar=False, omit_master=False, omit_grains=False):
    opts, grains, pillar = STATE.opts, STATE.grains, STATE.pillar
    if merge is None:
        if not omit_opts:
            ret = traverse_dict_and_list(opts, key, "_|-", delimiter=delimiter)
            if ret != "_|-":
                return _sdb_get(ret)
        if not omit_grains:
            ret = traverse_dict_and_list(grains, key, "_|-", delimiter)
            if ret != "_|-":
                return _sdb_get(ret)
        if not omit_pillar:
            ret = traverse_dict_and_list(pillar, key, "_|-", delimiter=delimiter)
            if ret != "_|-":
                return _sdb_get(ret)
        if not omit_master:
            ret = traverse_dict_and_list(pillar.get("master", {}), key, "_|-", delimiter=delimiter)
            if ret != "_|-":
                return _sdb_get(ret)
        ret = traverse_dict_and_list(CONFIG_DEFAULTS, key, "_|-", delimiter=delimiter)
        if ret != "_|-":
            return _sdb_get(ret)
    else:
        if merge not in ("recurse", "overwrite"):
            log.warning("Unsupported merge strategy '%s'. Falling back to 'recurse'.", merge)
            merge = "recurse"
        merge_lists = opts.get("pillar_merge_lists")
        data = copy.copy(CONFIG_DEFAULTS)
        data = globals()["merge"](data, pillar.get("master", {}), strategy=merge, merge_lists=merge_lists)
        data = globals()["merge"](data, pillar, strategy=merge, merge_lists=merge_lists)
        data = globals()["merge"](data, grains, strategy=merge, merge_lists=merge_lists)
        data = globals()["merge"](data, opts, strategy=merge, merge_lists=merge_lists)
        ret = traverse_dict_and_list(data, key, "_|-", delimiter=delimiter)
        if ret != "_|-":
            return _sdb_get(ret)
    return default


def _config_option(value, default=None, omit_opts=False, omit_grains=False, omit_pillar=False,
                   omit_master=False, omit_all=False, wildcard=False):
    opts, grains, pillar = STATE.opts, STATE.grains, STATE.pillar
    if omit_all:
        omit_opts = omit_grains = omit_pillar = omit_master = True
    if default is None:
        default = "" if not wildcard else {}
    if not wildcard:
        if not omit_opts and value in opts:
            return opts[value]
        if not omit_grains and value in grains:
            return grains[value]
        if not omit_pillar and value in pillar:
            return pillar[value]
        if not omit_master and value in pillar.get("master", {}):
            return pillar["master"][value]
        if value in CONFIG_DEFAULTS:
            return CONFIG_DEFAULTS[value]
        return default
    ret = {}
    for omit, data in ((omit_master, pillar.get("master", {})), (omit_pillar, pillar), (omit_grains, grains),
                       (omit_opts, opts)):
        if not omit:
            ret.update({x: data[x] for x in fnmatch.filter(data, value)})
    for item in (x for x in fnmatch.filter(CONFIG_DEFAULTS, value) if x not in ret):
        ret[item] = CONFIG_DEFAULTS[item]
    return ret or default


def _file_exists(path):
    return os.path.isfile(os.path.expanduser(path))


def _directory_exists(path):
    return os.path.isdir(os.path.expanduser(path))


def _file_read(path, binary=False):
    path = os.path.expanduser(path)
    with open(path, "rb" if binary else "r") as fh:
        return fh.read()


def _cmd(cmd, cwd=None, stdin=None, shell="/bin/bash", python_shell=None, env=None, rstrip=True,
         redirect_stderr=True, timeout=None, stdout_only=False, **kwargs):
    """salt.modules.cmdmod._run with the defaults a template call gets (no runas/vt/bg)."""
    if STATE.opts.get("cmd_safe", True) is False and python_shell is None:
        python_shell = True
    if cwd is None:
        cwd = os.path.expanduser("~")
    if not os.path.isabs(cwd) or not os.path.isdir(cwd):
        raise CommandExecutionError(f"Specified cwd '{cwd}' either not absolute or does not exist")
    run_env = os.environ.copy()
    for k in ("LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES", "LC_PAPER",
              "LC_NAME", "LC_ADDRESS", "LC_TELEPHONE", "LC_MEASUREMENT", "LC_IDENTIFICATION", "LANGUAGE"):
        run_env.setdefault(k, "C")
    if isinstance(env, dict):
        run_env.update({str(k): str(v) for k, v in env.items()})
    if python_shell is not True and not isinstance(cmd, list):
        cmd = shlex.split(cmd)
    try:
        proc = subprocess.run(
            cmd, shell=python_shell is True, executable=shell if python_shell is True else None, cwd=cwd,
            env=run_env, input=stdin.encode() if isinstance(stdin, str) else None,
            stdin=None if isinstance(stdin, str) else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if redirect_stderr and not stdout_only else subprocess.PIPE,
            timeout=timeout, close_fds=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CommandExecutionError(f"Unable to run command '{cmd}' with the context '{{}}', reason: {exc}")
    out = proc.stdout.decode("utf-8", "replace")
    if rstrip:
        out = out.rstrip()
    if proc.returncode != 0:
        log.error("Command '%s' failed with return code: %s", cmd, proc.returncode)
    return out


def _cmd_run(cmd, **kwargs):
    return _cmd(cmd, **kwargs)


def _cmd_shell(cmd, **kwargs):
    kwargs["python_shell"] = True
    return _cmd(cmd, **kwargs)


def _cmd_run_stdout(cmd, **kwargs):
    kwargs["redirect_stderr"] = False
    kwargs["stdout_only"] = True
    return _cmd(cmd, **kwargs)


def _call_master(fun, args):
    """Ask the master (over this worker's socketpair) and wait for its answer: the only
    calls it serves are render.hpp's callable_functions (mine.get)."""
    body = json.dumps({"call": fun, "args": to_wire(args)}, ensure_ascii=False, allow_nan=False).encode("utf-8")
    _write_frame(body)
    hdr = _read_exact(4)
    if hdr is None:
        raise CommandExecutionError(f"{fun}: the master closed the render channel")
    (length,) = struct.unpack(">I", hdr)
    reply = _read_exact(length)
    if reply is None:
        raise CommandExecutionError(f"{fun}: the master closed the render channel")
    reply = json.loads(reply)
    if not reply.get("ok"):
        raise CommandExecutionError(reply.get("error") or f"{fun} failed")
    return from_wire(reply.get("value"))


def _mine_get(tgt, fun, tgt_type="glob", exclude_minion=False):
    """salt/modules/mine.py get, answered by the master's mine for the minion whose pillar
    this is (its mine_functions allow_tgt ACLs apply to that minion)."""
    ret = _call_master("mine.get", {"tgt": tgt, "fun": fun, "tgt_type": tgt_type})
    minion_id = STATE.opts.get("id") if STATE is not None else None
    if exclude_minion and isinstance(ret, dict) and minion_id in ret:
        del ret[minion_id]
    return ret


def _runner_mine_get(tgt, fun, tgt_type="glob"):
    """salt/runners/mine.py get: asked with the master's own id (entries with allow_tgt are
    hidden from it, as in Salt)."""
    return _call_master("mine.get", {"tgt": tgt, "fun": fun, "tgt_type": tgt_type, "runner": True})


def _saltutil_runner(name, arg=None, kwarg=None, full_return=False, saltenv="base", jid=None,
                     asynchronous=False, **kwargs):
    """saltutil.runner for the one runner a pillar may reach in sylvite: mine.get."""
    if name != "mine.get":
        raise NotAvailable(f"'saltutil.runner' in sylvite's master-side renderer runs only 'mine.get', not '{name}'")
    args = list(arg) if isinstance(arg, (list, tuple)) else ([] if arg is None else [arg])
    kw = dict(kwarg) if isinstance(kwarg, dict) else {}
    kw.update({k: v for k, v in kwargs.items() if not k.startswith("__")})
    return _runner_mine_get(*args, **kw)


SALT_FUNCTIONS = {
    "grains.get": _grains_get,
    "grains.item": _grains_item,
    "grains.items": _grains_items,
    "grains.filter_by": _grains_filter_by,
    "grains.ls": _grains_ls,
    "pillar.get": _pillar_get,
    "pillar.item": _pillar_item,
    "pillar.items": _pillar_items,
    "pillar.raw": lambda key=None: dict(STATE.pillar) if key is None else STATE.pillar.get(key, {}),
    "config.get": _config_get,
    "config.option": _config_option,
    "file.file_exists": _file_exists,
    "file.directory_exists": _directory_exists,
    "file.read": _file_read,
    "cmd.run": _cmd_run,
    "cmd.shell": _cmd_shell,
    "cmd.run_stdout": _cmd_run_stdout,
    "test.true": lambda *a, **k: True,
    "test.false": lambda *a, **k: False,
    "mine.get": _mine_get,
    "saltutil.runner": _saltutil_runner,
}


# Execution module names of Salt 3008.5 (salt/modules/ files and __virtualname__s): a
# function of one of these is 'not available in sylvite'; any other name is unknown to
# Salt too and behaves as in Salt (an undefined attribute of the AliasedLoader).
SALT_MODULE_NAMES = frozenset("""
acl aix_group aix_shadow aixpkg aliases alternatives ansible ansiblegate apache apf appx
aptpkg archive arista_pyeapi artifactory assistive asymmetric at at_solaris auditpol
autoruns baredoc bcache beacons bgp bridge cassandra_cql celery certutil chef chocolatey
chronos chroot cloud cmd cmdmod config cp cron cryptdev data debconf debconfmod
debian_ip debian_service debuild_pkgbuild defaults desktop devinfo devmap dig disk dism
dnsutil dpkg_lowpkg dsc dsc_resource dummyproxy_pkg dummyproxy_service environ etcd
etcd_mod ethtool event extfs file firewall firewalld fmadm git gpg grains group groupadd
hashutil highstate_doc hosts http idem incron ini ini_manage iosconfig ip ipset iptables
iwtools jinja junos kernelpkg kernelpkg_linux_apt kernelpkg_linux_yum key keyboard
keychain kmod lgpo lgpo_reg license linux_acl linux_ip linux_lvm linux_service
linux_shadow linux_sysctl locale localemod locate log logmod logrotate lowpkg lvm
mac_assistive mac_brew_pkg mac_desktop mac_group mac_keychain mac_pkgutil mac_portspkg
mac_power mac_service mac_shadow mac_softwareupdate mac_sysctl mac_system mac_timezone
mac_user mac_xattr macdefaults macpackage match mdadm_raid mine minion mod_random mount
mysql nacl napalm napalm_bgp napalm_formula napalm_mod napalm_netacl napalm_network
napalm_ntp napalm_probes napalm_route napalm_snmp napalm_users napalm_yang
napalm_yang_mod net netacl netaddress netplan_ip network nfs3 nftables nixpkg nm_ip npm
ntp nxos nxos_api nxos_upgrade oracle osquery out pacmanpkg pam parted_partition
partition pillar pip pkg pkg_resource pkgbuild pkgin pkgng pkgutil postgres power
powercfg probes proxy ps psget publish puppet pw_group pw_user pyeapi pyenv quota
rabbitmq raid random rbac rbac_solaris rdp reg rest_pkg rest_sample_utils rest_service
restartcheck ret rh_ip rh_service route rpm_lowpkg rpmbuild_pkgbuild rsync salt_proxy
salt_version saltcheck saltcloud saltcloudmod saltutil schedule scp scp_mod scsi sdb
seed selinux service shadow shortcut slack slack_notify slsutil smbios smf_service
snapper snmp softwareupdate solaris_fmadm solaris_group solaris_shadow solaris_system
solaris_user solarisipspkg solarispkg sqlite3 ssh ssh_pkg ssh_pki ssh_service state
status supervisord sys sysctl sysfs syslog_ng sysmod system systemd_service task temp
test test_virtual textfsm textfsm_mod timezone tls udev upstart_service user useradd
users vagrant virtualenv virtualenv_mod vsphere webutil win_appx win_auditpol
win_autoruns win_certutil win_dacl win_disk win_dism win_dns_client win_dsc
win_dsc_resource win_event win_file win_firewall win_groupadd win_iis win_ip win_lgpo
win_lgpo_reg win_license win_network win_ntp win_path win_pkg win_pki win_powercfg
win_psget win_servermanager win_service win_shadow win_shortcut win_smtp_server win_snmp
win_status win_system win_task win_timezone win_useradd win_wua win_wusa winrepo wusa
x509 x509_v2 xattr xfs xml yaml yumpkg zk_concurrency zoneadm zonecfg zypperpkg
""".split())


def _missing_function(name):
    def missing(*args, **kwargs):
        raise NotAvailable(
            "'{}' is not available in sylvite's master-side renderer; the salt functions available "
            "to templates are: {}".format(name, ", ".join(sorted(SALT_FUNCTIONS))))

    missing.__name__ = "missing"
    return missing


class FunctionDict(dict):
    """Salt's _split_module_dicts: 'mod.fun' keys plus mod objects for salt.mod.fun."""

    def __missing__(self, name):
        if "." in name and name.split(".", 1)[0] in SALT_MODULE_NAMES:
            return _missing_function(name)
        raise KeyError(name)


class _MissingModule:
    def __init__(self, mod):
        self._mod = mod

    def __getattr__(self, fun):
        if fun.startswith("_"):
            raise AttributeError(fun)
        return _missing_function(f"{self._mod}.{fun}")


def split_module_dicts():
    mod_dict = FunctionDict(SALT_FUNCTIONS)
    for module_func_name, mod_fun in SALT_FUNCTIONS.items():
        mod, fun = module_func_name.split(".", 1)
        if mod not in mod_dict:
            mod_dict[mod] = lambda: None
        setattr(mod_dict[mod], fun, mod_fun)
    return mod_dict


class AliasedLoader:  # salt/utils/templates.py
    __module__ = "salt.utils.templates"  # Jinja names it in "... object has no attribute" errors

    def __init__(self, wrapped):
        self.wrapped = wrapped

    def __getitem__(self, name):
        return self.wrapped[name]

    def __getattr__(self, name):
        wrapped = object.__getattribute__(self, "wrapped")
        if isinstance(wrapped, dict):
            if name in wrapped:
                return wrapped[name]
            if name.startswith("_") or name not in SALT_MODULE_NAMES:
                raise AttributeError(name)
            return _MissingModule(name)
        return getattr(wrapped, name)

    def __contains__(self, name):
        return name in self.wrapped


# --- salt/utils/templates.py ----------------------------------------------------------
def generate_sls_context(tmplpath, sls):
    sls_context = {}
    slspath = sls.replace(".", "/").rstrip("/")
    if tmplpath:
        template = str(pathlib.Path(tmplpath).as_posix())
        if not sls:
            template = template.rsplit("/", 1)[-1]
        elif template.endswith(f"{slspath}.sls"):
            template = template[-(4 + len(slspath)):]
        elif template.endswith(f"{slspath}/init.sls"):
            template = template[-(9 + len(slspath)):]
        else:
            template = sls
            sls_context.update(dict(tplpath=tmplpath, tplfile=template,
                                    tpldir=str(pathlib.Path(sls).parents[0].as_posix())))
            return sls_context
        slspath = template.rsplit("/", 1)[0] if "/" in template else ""
        sls_context.update(dict(tplpath=tmplpath, tplfile=template, tpldir=slspath if slspath else ".",
                                tpldot=slspath.replace("/", ".")))
    sls_context.update(dict(slspath=slspath, slsdotpath=slspath.replace("/", "."),
                            slscolonpath=slspath.replace("/", ":"), sls_path=slspath.replace("/", "_")))
    return sls_context


def _get_jinja_error_slug(tb_data):
    try:
        return [x for x in tb_data if x[2] in ("top-level template code", "template", "<module>")][-1]
    except IndexError:
        pass


def _get_jinja_error_message(tb_data):
    try:
        line = _get_jinja_error_slug(tb_data)
        return "{0}({1}):\n{3}".format(*line)
    except IndexError:
        pass
    return None


def _get_jinja_error_line(tb_data):
    try:
        return _get_jinja_error_slug(tb_data)[1]
    except IndexError:
        pass
    return None


def _get_jinja_error(trace, context=None):
    if not context:
        context = {}
    out = ""
    error = _get_jinja_error_slug(trace)
    line = _get_jinja_error_line(trace)
    msg = _get_jinja_error_message(trace)
    add_log = False
    template_path = None
    if "sls" not in context:
        if (error[0] != "<unknown>") and os.path.exists(error[0]):
            template_path = error[0]
            add_log = True
    else:
        filen = context["sls"].replace(".", "/")
        if not error[0].endswith(filen) and os.path.exists(error[0]):
            add_log = True
            template_path = error[0]
    if add_log:
        if template_path:
            out = f"\n{msg.splitlines()[0]}\n"
            with open(template_path) as fp_:
                template_contents = fp_.read()
            out += get_context(template_contents, line, marker="    <======================")
        else:
            out = f"\n{msg}\n"
        line = 0
    return line, out


class SaltCacheLoader(BaseLoader):
    """salt/utils/jinja.py SaltCacheLoader over the environment's roots (no file client:
    the master reads its roots directly, as Salt's local PillarClient does)."""

    def __init__(self, roots, encoding="utf-8"):
        self.searchpath = list(roots)
        self.encoding = encoding
        self.cached = []

    def _find(self, template):
        for spath in self.searchpath:
            fn = os.path.join(spath, template)
            if os.path.isfile(fn):
                return fn
        return None

    def check_cache(self, template):
        if template not in self.cached and self._find(template):
            self.cached.append(template)

    def get_source(self, environment, template):
        _template = template
        if template.split("/", 1)[0] in ("..", "."):
            is_relative = True
        else:
            is_relative = False
        if is_relative:
            if not environment or "tpldir" not in environment.globals:
                log.warning('Relative path "%s" cannot be resolved without an environment', template)
                raise TemplateNotFound(template)
            base_path = environment.globals["tpldir"]
            _template = os.path.normpath("/".join((base_path, _template)))
            if _template.split("/", 1)[0] == "..":
                log.warning('Discarded template path "%s": attempts to ascend outside of salt://', template)
                raise TemplateNotFound(template)
            if environment.globals.get("opts", {}).get("file_client") == "local" and os.path.isabs(base_path):
                _template = os.path.relpath(_template, base_path)
        self.check_cache(_template)
        if environment and template:
            tpldir = os.path.dirname(_template).replace("\\", "/")
            tplfile = _template
            if is_relative:
                tpldir = environment.globals.get("tpldir", tpldir)
                tplfile = template
            tpldata = {"tplfile": tplfile, "tpldir": "." if tpldir == "" else tpldir,
                       "tpldot": tpldir.replace("/", ".")}
            environment.globals.update(tpldata)
        if _template in self.cached or os.path.exists(_template):
            for spath in self.searchpath:
                filepath = os.path.join(spath, _template)
                try:
                    with open(filepath, "rb") as ifile:
                        contents = ifile.read().decode(self.encoding)
                        mtime = os.path.getmtime(filepath)

                        def uptodate():
                            try:
                                return os.path.getmtime(filepath) == mtime
                            except OSError:
                                return False

                        return contents, filepath, uptodate
                except OSError:
                    continue
        raise TemplateNotFound(template)


DEBUG_HOOKS = False


def _debug_globals():
    def exit_now(code=3):
        sys.stderr.flush()
        os._exit(int(code))

    def garbage():
        os.write(PROTO_OUT, b"\x00\x00\x00\x05junk!")
        return ""

    return {"sylvite_debug_exit": exit_now, "sylvite_debug_garbage": garbage}


# Compiled-template cache (sylvite's, not Salt's): compiling is most of a render's cost and
# the same files are rendered for every minion. Keyed by everything the generated code
# depends on (the environment's syntax options and extensions, name, filename, source);
# rendering itself is untouched (a fresh Template per render, as Salt).
_CODE_CACHE = OrderedDict()
_CODE_CACHE_MAX = 2048
_CODE_CACHE_MAX_SOURCE = 1 << 20


def _env_signature(env):
    return (
        type(env).__name__, env.block_start_string, env.block_end_string, env.variable_start_string,
        env.variable_end_string, env.comment_start_string, env.comment_end_string, env.line_statement_prefix,
        env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks, env.newline_sequence,
        env.keep_trailing_newline, env.optimized, repr(env.autoescape), env.is_async, tuple(sorted(env.extensions)),
    )


class CachingSandboxedEnvironment(jinja2.sandbox.SandboxedEnvironment):
    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):
        if raw or defer_init or not isinstance(source, str) or len(source) > _CODE_CACHE_MAX_SOURCE:
            return super().compile(source, name, filename, raw, defer_init)
        key = (_env_signature(self), name, filename, source)
        code = _CODE_CACHE.get(key)
        if code is not None:
            _CODE_CACHE.move_to_end(key)
            return code
        code = super().compile(source, name, filename, raw, defer_init)
        _CODE_CACHE[key] = code
        if len(_CODE_CACHE) > _CODE_CACHE_MAX:
            _CODE_CACHE.popitem(last=False)
        return code


def render_jinja_tmpl(tmplstr, context, tmplpath=None):
    opts = context["opts"]
    newline = False
    if tmplstr and not isinstance(tmplstr, str):
        tmplstr = tmplstr.decode(SLS_ENCODING)
    if tmplstr.endswith(os.linesep):
        newline = os.linesep
    elif tmplstr.endswith("\n"):
        newline = "\n"
    loader = SaltCacheLoader(STATE.roots)
    env_args = {"extensions": [], "loader": loader}
    if hasattr(jinja2.ext, "with_"):
        env_args["extensions"].append("jinja2.ext.with_")
    if hasattr(jinja2.ext, "do"):
        env_args["extensions"].append("jinja2.ext.do")
    if hasattr(jinja2.ext, "loopcontrols"):
        env_args["extensions"].append("jinja2.ext.loopcontrols")
    env_args["extensions"].append(SerializerExtension)
    opt_jinja_env = opts.get("jinja_env", {})
    opt_jinja_sls_env = opts.get("jinja_sls_env", {})
    opt_jinja_env = dict(opt_jinja_env) if isinstance(opt_jinja_env, dict) else {}
    opt_jinja_sls_env = dict(opt_jinja_sls_env) if isinstance(opt_jinja_sls_env, dict) else {}
    if opts.get("jinja_trim_blocks", False):
        opt_jinja_env["trim_blocks"] = True
        opt_jinja_sls_env["trim_blocks"] = True
    if opts.get("jinja_lstrip_blocks", False):
        opt_jinja_env["lstrip_blocks"] = True
        opt_jinja_sls_env["lstrip_blocks"] = True

    def opt_jinja_env_helper(opts, optname):
        for k, v in opts.items():
            k = k.lower()
            if hasattr(jinja2.defaults, k.upper()):
                env_args[k] = v
            else:
                log.warning("Jinja2 environment %s is not recognized", k)

    def parse_jinja_file_opts(tmplstr):
        jinja2_override = "#jinja2:"
        lines = tmplstr.splitlines(keepends=True)
        if not lines:
            return tmplstr
        idx = 0
        if lines[0].startswith("#!") and not lines[0].startswith("#!/"):
            idx = 1
        if idx >= len(lines) or not lines[idx].startswith(jinja2_override):
            return tmplstr
        payload = lines[idx][len(jinja2_override):]
        if not payload.strip():
            return tmplstr
        try:
            jdata = json.loads(payload)
        except ValueError:
            log.warning("Ignoring malformed '#jinja2:' header in template: %s", lines[idx].rstrip("\r\n"))
            return tmplstr
        if not isinstance(jdata, dict):
            log.warning("Ignoring '#jinja2:' header that is not a JSON object: %s", lines[idx].rstrip("\r\n"))
            return tmplstr
        opt_jinja_env_helper(jdata, "jinja_fileopts")
        del lines[idx]
        return "".join(lines)

    if "sls" in context and context["sls"] != "":
        opt_jinja_env_helper(opt_jinja_sls_env, "jinja_sls_env")
    else:
        opt_jinja_env_helper(opt_jinja_env, "jinja_env")
    tmplstr = parse_jinja_file_opts(tmplstr)
    if opts.get("allow_undefined", False):
        jinja_env = CachingSandboxedEnvironment(**env_args)
    else:
        jinja_env = CachingSandboxedEnvironment(undefined=jinja2.StrictUndefined, **env_args)
    indent_filter = jinja_env.filters.get("indent")
    jinja_env.tests.update(JinjaTest.salt_jinja_tests)
    jinja_env.filters.update(JinjaFilter.salt_jinja_filters)
    jinja_env.filters["indent"] = indent_filter  # Jinja >= 2.11
    jinja_env.globals.update(JinjaGlobal.salt_jinja_globals)
    jinja_env.globals["odict"] = OrderedDict
    jinja_env.globals["show_full_context"] = show_full_context
    jinja_env.tests["list"] = is_list
    if DEBUG_HOOKS:
        jinja_env.globals.update(_debug_globals())
    decoded_context = dict(context)
    jinja_env.globals.update(decoded_context)
    try:
        template = jinja_env.from_string(tmplstr)
        output = template.render(**decoded_context)
    except jinja2.exceptions.UndefinedError as exc:
        trace = traceback.extract_tb(sys.exc_info()[2])
        line, out = _get_jinja_error(trace, context=decoded_context)
        if not line:
            tmplstr = ""
        raise SaltRenderError(f"Jinja variable {exc}{out}", line, tmplstr)
    except (jinja2.exceptions.TemplateRuntimeError, jinja2.exceptions.TemplateSyntaxError,
            jinja2.exceptions.SecurityError) as exc:
        trace = traceback.extract_tb(sys.exc_info()[2])
        line, out = _get_jinja_error(trace, context=decoded_context)
        if not line:
            tmplstr = ""
        raise SaltRenderError(f"Jinja syntax error: {exc}{out}", line, tmplstr)
    except (SaltInvocationError, CommandExecutionError) as exc:
        trace = traceback.extract_tb(sys.exc_info()[2])
        line, out = _get_jinja_error(trace, context=decoded_context)
        if not line:
            tmplstr = ""
        raise SaltRenderError("Problem running salt function in Jinja template: {}{}".format(exc, out), line,
                              tmplstr)
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:  # pylint: disable=broad-except
        tracestr = traceback.format_exc()
        trace = traceback.extract_tb(sys.exc_info()[2])
        line, out = _get_jinja_error(trace, context=decoded_context)
        if not line:
            tmplstr = ""
        else:
            tmplstr += f"\n{tracestr}"
        raise SaltRenderError(f"Jinja error: {exc}{out}", line, tmplstr, trace=tracestr)
    if newline:
        output += newline
    return output


def render_tmpl_jinja(tmplsrc, context=None, tmplpath=None, **kws):
    """salt/utils/templates.py wrap_tmpl_func(render_jinja_tmpl) with to_str=True."""
    if context is None:
        context = {}
    if "salt" in kws:
        kws["salt"] = AliasedLoader(kws["salt"])
    kws.update(context)
    context = kws
    if "sls" in context:
        sls_context = generate_sls_context(tmplpath, context["sls"])
        for key, value in sls_context.items():
            context.setdefault(key, value)
    tmplstr = tmplsrc.read()
    try:
        output = render_jinja_tmpl(tmplstr, context, tmplpath)
    except SaltRenderError:
        raise
    except Exception:  # pylint: disable=broad-except
        return dict(result=False, data=traceback.format_exc())
    return dict(result=True, data=output)


# --- renderers (salt/renderers/*.py) ---------------------------------------------------
def render_jinja(template_file, saltenv="base", sls="", argline="", context=None, tmplpath=None, **kws):
    from_str = argline == "-s"
    if not from_str and argline:
        raise SaltRenderError(f"Unknown renderer option: {argline}")
    variables = dict(STATE.context)
    variables.setdefault("proxy", {})
    variables["salt"] = split_module_dicts()
    variables["grains"] = STATE.grains
    variables["opts"] = STATE.opts
    variables["pillar"] = STATE.pillar
    variables["saltenv"] = saltenv
    variables["sls"] = sls
    variables.update(kws)
    tmp_data = render_tmpl_jinja(template_file, context=context, tmplpath=tmplpath, **variables)
    if not tmp_data.get("result", False):
        raise SaltRenderError(tmp_data.get("data", "Unknown render error in jinja renderer"))
    return io.StringIO(tmp_data["data"])


_YAML_ERROR_MAP = {"found character '\\t' that cannot start any token": "Illegal tab character"}


def render_yaml(yaml_data, saltenv="base", sls="", argline="", **kws):
    if not isinstance(yaml_data, str):
        yaml_data = yaml_data.read()
    with warnings.catch_warnings(record=True) as warn_list:
        try:
            data = safe_load(yaml_data, Loader=lambda *args: SaltYamlSafeLoader(*args, dictclass=OrderedDict))
        except ScannerError as exc:
            err_type = _YAML_ERROR_MAP.get(exc.problem, exc.problem)
            line_num = exc.problem_mark.line + 1
            raise SaltRenderError(err_type, line_num, exc.problem_mark.buffer)
        except (ParserError, ConstructorError) as exc:
            raise SaltRenderError(exc)
        for item in warn_list:
            log.warning("%s found in salt://%s saltenv=%s", item.message, sls, saltenv)
        if not data:
            data = {}

        def _validate_data(data):
            if isinstance(data, dict):
                for key, value in data.items():
                    if isinstance(key, dict):
                        raise SaltRenderError("Invalid YAML, possible double curly-brace")
                    _validate_data(value)
            elif isinstance(data, list):
                for item in data:
                    _validate_data(item)

        _validate_data(data)
        return data


def render_json(json_data, saltenv="base", sls="", **kws):
    if not isinstance(json_data, str):
        json_data = json_data.read()
    if json_data.startswith("#!"):
        json_data = json_data[(json_data.find("\n") + 1):]
    if not json_data.strip():
        return {}
    return json.loads(json_data)


GPG_CIPHERTEXT = re.compile(
    r"-----BEGIN PGP MESSAGE-----.*?-----END PGP MESSAGE-----".encode("ascii"), re.DOTALL)


def _gpg_exec():
    for d in ("/usr/bin", "/bin", "/usr/local/bin"):
        p = os.path.join(d, "gpg")
        if os.access(p, os.X_OK):
            return p
    raise SaltRenderError("GPG unavailable")


def _gpg_key_dir():
    gpg_keydir = _config_get("gpg_keydir")
    if not gpg_keydir:
        opts = STATE.opts
        gpg_keydir = opts.get("gpg_keydir", os.path.join(
            opts.get("config_dir", os.path.dirname(opts.get("conf_file", "/etc/salt/master"))), "gpgkeys"))
    return gpg_keydir


def _decrypt_ciphertext(cipher):
    try:
        cipher = to_unicode(cipher).replace(r"\n", "\n")
    except UnicodeDecodeError:
        pass
    cipher = to_bytes(cipher)
    cmd = [_gpg_exec(), "--homedir", _gpg_key_dir(), "--status-fd", "2", "--no-tty", "-d"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, shell=False)
    decrypted_data, decrypt_error = proc.communicate(input=cipher)
    if not decrypted_data:
        log.warning("Could not decrypt cipher %r, received: %r", cipher, decrypt_error)
        if STATE.opts.get("gpg_decrypt_must_succeed", True):
            raise SaltRenderError("Could not decrypt cipher {!r}, received: {!r}".format(cipher, decrypt_error))
        return cipher
    return decrypted_data


def _decrypt_ciphertexts(cipher, translate_newlines=False, encoding=None):
    cipher = to_bytes(cipher)
    if translate_newlines:
        cipher = cipher.replace(to_bytes(r"\n"), to_bytes("\n"))

    def replace(match):
        return to_bytes(_decrypt_ciphertext(match.group()))

    ret, num = GPG_CIPHERTEXT.subn(replace, to_bytes(cipher))
    if num > 0:
        ret = ret.rstrip(b"\n")
    else:
        ret = cipher
    try:
        ret = to_unicode(ret, encoding=encoding)
    except UnicodeDecodeError:
        pass
    return ret


def _decrypt_object(obj, translate_newlines=False, encoding=None):
    if isinstance(obj, io.StringIO):
        return _decrypt_object(obj.getvalue(), translate_newlines)
    if isinstance(obj, (str, bytes)):
        return _decrypt_ciphertexts(obj, translate_newlines=translate_newlines, encoding=encoding)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            obj[key] = _decrypt_object(value, translate_newlines=translate_newlines)
        return obj
    elif isinstance(obj, list):
        for key, value in enumerate(obj):
            obj[key] = _decrypt_object(value, translate_newlines=translate_newlines)
        return obj
    return obj


def render_gpg(gpg_data, saltenv="base", sls="", argline="", **kwargs):
    _gpg_exec()
    return _decrypt_object(gpg_data, translate_newlines=kwargs.get("translate_newlines", False),
                           encoding=kwargs.get("encoding", None))


RENDERERS = {"jinja": render_jinja, "yaml": render_yaml, "json": render_json, "gpg": render_gpg}
# Renderers Salt 3008.5 ships that sylvite does not run (salt/renderers/).
SALT_ONLY_RENDERERS = {"mako", "msgpack", "nacl", "py", "pyobjects", "stateconf", "toml", "yamlex", "pydsl",
                       "cheetah", "genshi", "wempy", "dson", "hjson", "json5", "pass", "aws_kms", "yamlex"}


class UnsupportedRenderer(Exception):
    pass


# --- salt/template.py ------------------------------------------------------------------
OLD_STYLE_RENDERERS = {}
for comb in ("yaml_jinja", "yaml_mako", "yaml_wempy", "json_jinja", "json_mako", "json_wempy", "yamlex_jinja",
             "yamlexyamlex_mako", "yamlexyamlex_wempy"):
    fmt, tmpl = comb.split("_")
    OLD_STYLE_RENDERERS[comb] = f"{tmpl}|{fmt}"


def check_render_pipe_str(pipestr, blacklist, whitelist, template):
    if pipestr is None:
        return []
    parts = [r.strip() for r in pipestr.split("|")]
    results = []
    if parts[0] == pipestr and pipestr in OLD_STYLE_RENDERERS:
        parts = OLD_STYLE_RENDERERS[pipestr].split("|")
    for part in parts:
        name, argline = (part + " ").split(" ", 1)
        if whitelist and name not in whitelist or blacklist and name in blacklist:
            log.warning('The renderer "%s" is disallowed by configuration and will be skipped.', name)
            continue
        if name in RENDERERS:
            results.append((name, RENDERERS[name], argline.strip()))
        elif name in SALT_ONLY_RENDERERS:
            raise UnsupportedRenderer(
                "{}: the renderer '{}' (pipe '{}') is not supported by sylvite; supported renderers: {}".format(
                    template, name, pipestr, ", ".join(sorted(RENDERERS))))
        else:
            log.error('The renderer "%s" is not available', pipestr)
            return []
    return results


def template_shebang(template, default, blacklist, whitelist, input_data):
    with open(template, "r", encoding=SLS_ENCODING) as ifile:
        line = ifile.readline()
    if line.startswith("#!") and not line.startswith("#!/"):
        return check_render_pipe_str(line.strip()[2:], blacklist, whitelist, template)
    return check_render_pipe_str(default, blacklist, whitelist, template)


def compile_template(template, default, blacklist, whitelist, saltenv="base", sls="", **kwargs):
    ret = {}
    if not os.path.isfile(template):
        log.error("Template does not exist: %s", template)
        return ret
    if os.stat(template).st_size == 0:
        return ret
    with open(template, encoding=SLS_ENCODING) as ifile:
        input_data = ifile.read()
        if not input_data.strip():
            log.error("Template is nothing but whitespace: %s", template)
            return ret
    render_pipe = template_shebang(template, default, blacklist, whitelist, input_data)
    windows_newline = "\r\n" in input_data
    input_data = io.StringIO(input_data)
    for name, render, argline in render_pipe:
        if isinstance(input_data, io.StringIO):
            input_data.seek(0)
        render_kwargs = dict(tmplpath=template)
        render_kwargs.update(kwargs)
        if argline:
            render_kwargs["argline"] = argline
        ret = render(input_data, saltenv, sls, **render_kwargs)
        input_data = ret
    if windows_newline:
        is_stringio = isinstance(ret, io.StringIO)
        contents = ret.read() if is_stringio else ret
        if isinstance(contents, str):
            if "\r\n" not in contents:
                contents = contents.replace("\n", "\r\n")
                ret = io.StringIO(contents) if is_stringio else contents
            elif is_stringio:
                ret.seek(0)
    return ret


# --- protocol --------------------------------------------------------------------------
BYTES_TAG = "__sylvite_bytes__"
FLOAT_TAG = "__sylvite_float__"


def from_wire(v):
    if isinstance(v, dict):
        if len(v) == 1 and BYTES_TAG in v and isinstance(v[BYTES_TAG], str):
            return base64.b64decode(v[BYTES_TAG])
        if len(v) == 1 and FLOAT_TAG in v and isinstance(v[FLOAT_TAG], str):
            return float(v[FLOAT_TAG])
        return {k: from_wire(x) for k, x in v.items()}
    if isinstance(v, list):
        return [from_wire(x) for x in v]
    return v


def _key(k):
    if isinstance(k, str):
        return k
    if k is None:
        return "None"
    if isinstance(k, bool):
        return "True" if k else "False"
    if isinstance(k, bytes):
        return k.decode("utf-8", "replace")
    return str(k)


def to_wire(v):
    if isinstance(v, io.StringIO):
        return v.getvalue()
    if isinstance(v, Mapping):
        return {_key(k): to_wire(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [to_wire(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return {BYTES_TAG: base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return {FLOAT_TAG: repr(v)}
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


def handle(req):
    global STATE
    req = from_wire(req)
    STATE = RenderState(req)
    path = req.get("path") or ""
    try:
        data = compile_template(path, req.get("default_pipe") or "jinja|yaml", req.get("blacklist") or [],
                                req.get("whitelist") or [], STATE.saltenv, req.get("sls") or "")
    except UnsupportedRenderer as exc:
        return {"status": "unsupported_renderer", "error": str(exc)}
    except MemoryError:
        return {"status": "render_error", "error": f"Rendering {path} ran out of memory"}
    except RecursionError as exc:
        return {"status": "render_error", "error": f"Jinja error: {exc}"}
    except Exception as exc:  # pylint: disable=broad-except
        log.debug("render of %s failed", path, exc_info=True)
        return {"status": "render_error", "error": str(exc)}
    return {"status": "ok", "data": to_wire(data)}


PROTO_IN = 0
PROTO_OUT = 1


def _read_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(PROTO_IN, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _write_frame(body):
    frame = struct.pack(">I", len(body)) + body
    view = memoryview(frame)
    while view:
        n = os.write(PROTO_OUT, view)
        view = view[n:]


def serve(debug_hooks=0):
    """The worker loop: one request, one reply, until stdin closes."""
    global PROTO_IN, PROTO_OUT, DEBUG_HOOKS
    DEBUG_HOOKS = bool(debug_hooks)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="sylvite-render[%(process)d] %(levelname)s %(message)s")
    # Keep the protocol descriptors private: stray prints go to stderr, children get /dev/null.
    PROTO_IN = os.dup(0)
    PROTO_OUT = os.dup(1)
    os.set_inheritable(PROTO_IN, False)
    os.set_inheritable(PROTO_OUT, False)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.setrecursionlimit(3000)
    while True:
        hdr = _read_exact(4)
        if hdr is None:
            return 0
        (length,) = struct.unpack(">I", hdr)
        body = _read_exact(length)
        if body is None:
            return 0
        try:
            req = json.loads(body)
            limit = int(req.get("max_output_bytes") or 0)
            reply = handle(req)
        except Exception as exc:  # pylint: disable=broad-except
            limit = 0
            reply = {"status": "render_error", "error": f"invalid render request: {exc}"}
        try:
            out = json.dumps(reply, ensure_ascii=False, allow_nan=False).encode("utf-8", "replace")
        except (TypeError, ValueError) as exc:
            out = json.dumps({"status": "render_error", "error": f"rendered data cannot be sent: {exc}"}).encode()
        if limit and len(out) > limit:
            out = json.dumps({"status": "render_error", "error": "rendering {} produced {} bytes, more than the "
                              "limit of {} bytes".format(req.get("path"), len(out), limit)}).encode("utf-8")
        _write_frame(out)


# salt/utils/dateutils.py date_cast parses fuzzy dates with timelib (PHP strtotime), which
# Debian does not package: absolute dates go through dateutil here, relative phrases
# ("+1 day", "next monday") are not understood (Salt's error text without timelib).
try:
    import dateutil.parser as _dateutil_parser
except ImportError:
    _dateutil_parser = None


def date_cast(date):
    if date is None:
        return datetime.datetime.now()
    elif isinstance(date, datetime.datetime):
        return date
    try:
        if isinstance(date, str):
            if not HAS_TIMELIB and _dateutil_parser is not None and not re.fullmatch(r"\s*[0-9.]+\s*", date):
                try:
                    return _dateutil_parser.parse(date)
                except (ValueError, OverflowError):
                    pass
            if date.isdigit():
                date = int(date)
            else:
                date = float(date)
        return datetime.datetime.fromtimestamp(date)
    except Exception:  # pylint: disable=broad-except
        if HAS_TIMELIB:
            raise ValueError(f"Unable to parse {date}")
        raise RuntimeError(f"Unable to parse {date}. Consider installing timelib")
