from strata._native import (
    AlreadyExists as AlreadyExists,
    Bucket as Bucket,
    Client as Client,
    Closed as Closed,
    InvalidArgument as InvalidArgument,
    NoDaemon as NoDaemon,
    NodeDown as NodeDown,
    NoSpace as NoSpace,
    NotFound as NotFound,
    StrataError as StrataError,
    connect as connect,
)
from strata._arrays import (
    CopyWarning as CopyWarning,
    get_array as get_array,
    put_array as put_array,
)
